"""Ctrl+C or SIGTERM while the gateway starts stops the start, even where the start goes
on to its end all the same (an upstream model's `import litellm` cannot stop mid-way; the
signal can land after the models started, or while the server binds): `serve` exits
128 + the signal and never says it serves (docs/serving.md). The signal is sent from a
known point of the start (no sleeping for it to land)."""
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette

import gateway.serve_command
from gateway.cli import main
from gateway.config import key_digest
from gateway.uvicorn_server import start_aware_server_class

STORE_ENV = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_SPENT_TOKENS",
             "STEPAHEAD_CACHE_DIR")

# `stepahead serve ARGS...` whose upstream model's start sends the process SIGNAL first,
# then starts as always (the signal lands in the start), importing a stand-in for litellm
# (the real import takes seconds here, and cannot be stopped mid-way either)
SIGNALLED_FROM_THE_UPSTREAM_START = """
import os, sys, types
import gateway.upstream
from gateway.cli import main

start = gateway.upstream.UpstreamBackend.start

async def start_signalled(self):
    os.kill(os.getpid(), int(sys.argv[1]))
    await start(self)

gateway.upstream.UpstreamBackend.start = start_signalled
gateway.upstream.import_litellm = lambda: types.SimpleNamespace()
sys.exit(main(sys.argv[2:]))
"""


def test_a_signal_during_an_upstream_only_start_stops_it_without_saying_it_serves(tmp_path: Path):
    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
                      "litellm_params = { mock_response = 'hi' }\n"
                      f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
    process = subprocess.run(
        [sys.executable, "-c", SIGNALLED_FROM_THE_UPSTREAM_START, str(int(signal.SIGTERM)),
         "serve", "--config", str(config), "--port", "0"],
        capture_output=True, text=True, timeout=120,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: str(tmp_path / name) for name in STORE_ENV}})
    assert "stepahead: stopping the start in progress" in process.stderr, process.stderr[-3000:]
    assert "serving on" not in process.stdout, process.stdout
    assert process.returncode == 128 + signal.SIGTERM, process.stderr[-3000:]
    assert process.stderr.rstrip().endswith("stepahead: stopped"), process.stderr[-3000:]
    assert "Uvicorn running on" not in process.stderr and "Traceback" not in process.stderr


class TrivialStart:
    """An app whose start cannot be stopped mid-way (as an upstream model's): it records
    that it started and stopped; the server around it announces into `announced`."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.announced: list[int] = []
        self.cancels = 0
        self.during_start = lambda: None

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(_app):
            self.events.append("started")
            self.during_start()
            try:
                yield
            finally:
                self.events.append("stopped")
        return Starlette(lifespan=lifespan)

    def cancel_start(self) -> None:
        self.cancels += 1

    def server(self, announce=None):
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=0, loop="asyncio", log_config=None,
                                log_level="warning", lifespan="on")
        return start_aware_server_class(self.cancel_start, announce or self.announced.append)(config)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_models_started_but_before_listening_undoes_the_start(monkeypatch, capsys,
                                                                                  stop_signal):
    """The start the signal came during ends (the cancel could not stop it): the app is
    stopped again before the server binds, nothing is announced, and `serve` exits
    128 + the signal."""
    start = TrivialStart()
    start.during_start = lambda: signal.raise_signal(stop_signal)
    server = start.server()
    monkeypatch.setattr(gateway.serve_command, "_server_or_exit_status", lambda args: server)
    assert main(["serve", "--model", "tiny"]) == 128 + stop_signal
    assert start.announced == [] and start.events == ["started", "stopped"] and start.cancels == 1
    assert server.start_cancelled_by == stop_signal and not server.started   # never bound
    assert capsys.readouterr().err == "stepahead: stopped\n"


def test_a_signal_while_the_server_binds_stops_it_unannounced(monkeypatch, capsys):
    """The signal lands after the app's start, while the server binds: once bound it
    stops (the app too), never announced, and `serve` exits 143, not 0."""
    import asyncio

    start = TrivialStart()
    server = start.server()
    create_server = asyncio.BaseEventLoop.create_server

    async def create_server_signalled(loop, *args, **kwargs):
        signal.raise_signal(signal.SIGTERM)
        return await create_server(loop, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_server", create_server_signalled)
    monkeypatch.setattr(gateway.serve_command, "_server_or_exit_status", lambda args: server)
    assert main(["serve", "--model", "tiny"]) == 128 + signal.SIGTERM
    assert start.announced == [] and start.events == ["started", "stopped"]
    assert server.start_cancelled_by == signal.SIGTERM and server.started   # it bound, then stopped
    assert capsys.readouterr().err == "stepahead: stopped\n"


def test_a_start_with_no_signal_is_announced_once_and_a_later_signal_stops_it_with_status_0(monkeypatch, capsys):
    """The normal case is unchanged: announced with the port bound, then a SIGTERM after
    it served is a clean stop (0), the app stopped once."""
    start = TrivialStart()

    def announce_then_stop(port: int) -> None:
        start.announced.append(port)
        signal.raise_signal(signal.SIGTERM)

    server = start.server(announce_then_stop)
    monkeypatch.setattr(gateway.serve_command, "_server_or_exit_status", lambda args: server)
    assert main(["serve", "--model", "tiny"]) == 0
    assert len(start.announced) == 1 and start.announced[0] > 0
    assert start.events == ["started", "stopped"] and start.cancels == 0 and server.start_cancelled_by is None
    assert capsys.readouterr().err == ""   # and the SIGTERM was not raised again once stopped: still here
