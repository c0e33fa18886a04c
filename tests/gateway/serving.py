"""Run an ASGI app under a real uvicorn server on 127.0.0.1 in a background thread.

One server per test module (see the module fixtures); `stop()` shuts it down cleanly
and runs the app's lifespan shutdown.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from gateway.config import DEFAULT_KEEP_ALIVE_S
from gateway.http_protocol import GuardedHttpToolsProtocol, uvicorn_protocols

# where the tests' conftest points the gateway's files, so a gateway served as a process
# keeps out of the user's data directory too (pass these variables on to it)
STORE_ENV = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_SPENT_TOKENS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_healthy(port: int, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Until a `stepahead serve` child answers /health with 200; fails if it exits first
    or the time runs out."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline_s and process.poll() is None
        time.sleep(0.2)


@dataclass(slots=True)
class RunningServer:
    server: uvicorn.Server
    thread: threading.Thread
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def start_server(app, *, startup_timeout_s: float = 120.0, shutdown_timeout_s: float = 5.0,
                 http=GuardedHttpToolsProtocol) -> RunningServer:
    """`app` served as `stepahead serve` serves it (its uvicorn protocol options,
    `gateway.http_protocol.uvicorn_protocols()`; `http` replaces the HTTP one)."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            **{**uvicorn_protocols(), "http": http},
                            timeout_graceful_shutdown=shutdown_timeout_s, timeout_keep_alive=DEFAULT_KEEP_ALIVE_S)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline_s = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline_s:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return RunningServer(server, thread, port)


def served_url(app, path: str = "/v1") -> Iterator[str]:
    """For a module fixture (`yield from served_url(app)`): `app` served on a free port,
    its base URL with `path`, the server stopped when the fixture ends."""
    server = start_server(app)
    try:
        yield f"{server.base_url}{path}"
    finally:
        server.stop()


def served_then_stopped_by_sigterm(tmp_path: Path, config_text: str,
                                   before_stop: Callable[[], None] | None = None) -> str:
    """Run `stepahead serve --port 0` on `config_text` until it answers /health, stop it by
    SIGTERM (after `before_stop`, when given), check that it said where it served (the port
    the system gave, not 0) and exited 0 after uvicorn's shutdown, without a traceback; its
    stderr. Its stores are `tmp_path / NAME` for each of STORE_ENV's variables."""
    config = tmp_path / "gw.toml"
    config.write_text(config_text)
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: str(tmp_path / name) for name in STORE_ENV}})
    try:
        first_line = process.stdout.readline()
        assert first_line.startswith("stepahead: serving on http://127.0.0.1:"), first_line
        url = first_line.split()[-1]
        assert not url.endswith(":0/v1")
        assert httpx.get(url.removesuffix("/v1") + "/health", timeout=10).status_code == 200   # ready once said
        if before_stop is not None:
            before_stop()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    assert "Application shutdown complete" in err and "Traceback" not in err
    return err
