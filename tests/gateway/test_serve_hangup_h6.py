"""A SIGHUP while a stopped gateway exits is ignored with its line, never the exit
status (QA64: `serve` put SIGHUP's default action back as it returned, and the exit
that followed, a second or more, died of a deploy's `kill -HUP` with status 129)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gateway.config import key_digest
from gateway.hangups_at_exit import HANGUP_WHILE_STOPPING
from gateway.hangups_at_exit import HangupsWhileExiting
from tests.gateway.serving import free_port

CONFIG = ("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
          "litellm_params = { mock_response = 'hi' }\n"
          f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
# the storm's gateway forwards to an upstream it never reaches: its child starts without
# importing litellm (seconds of CPU), which the exit status does not depend on
STORM_CONFIG = ("[[models]]\nname = 'up'\nkind = 'upstream'\nlitellm_model = 'openai/up'\n"
                "api_base = 'http://127.0.0.1:9/v1'\npassthrough = true\n"
                f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
STORE_ENV = ("STEPAHEAD_TRACE_DB", "STEPAHEAD_PREDICTOR_DIR", "STEPAHEAD_RESPONSES_DB", "STEPAHEAD_SPENT_TOKENS")


def test_the_stepahead_command_returns_from_serve_with_sighup_ignored_and_each_one_said(monkeypatch, tmp_path,
                                                                                         capfd):
    """`main()` on the process's own command line, as the `stepahead` command runs it."""
    import uvicorn

    from gateway.cli import main

    path = tmp_path / "gw.toml"
    path.write_text(CONFIG)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    monkeypatch.setattr(sys, "argv", ["stepahead", "serve", "--config", str(path), "--port", str(free_port())])
    try:
        assert main() == 0
        left = signal.getsignal(signal.SIGHUP)
        assert isinstance(left, HangupsWhileExiting), left   # the default action would end this process
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.01)   # the handler runs at the next bytecode boundary
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert capfd.readouterr().err.count(HANGUP_WHILE_STOPPING + "\n") == 1


def test_serve_in_a_process_that_goes_on_puts_back_the_sighup_handler_it_found(monkeypatch, tmp_path):
    """`main([...])` (a test, an embedder): the process goes on, so its own handler comes
    back (FI107 N1: every in-process serve left HangupsWhileExiting, and an atexit hook)."""
    import atexit

    import uvicorn

    from gateway.cli import main
    from gateway.hangups_at_exit import ignore_hangups

    path = tmp_path / "gw.toml"
    path.write_text(CONFIG)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    registered = []
    monkeypatch.setattr(atexit, "register", lambda hook, *args, **kwargs: registered.append(hook))

    def own(signum, frame) -> None:   # the embedding process's own handler
        pass
    for before in (own, signal.SIG_DFL, signal.SIG_IGN):
        signal.signal(signal.SIGHUP, before)
        try:
            assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 0
            assert signal.getsignal(signal.SIGHUP) == before
        finally:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert ignore_hangups not in registered


def test_a_sighup_storm_after_sigterm_never_changes_the_exit_status(tmp_path: Path):
    """SIGTERM, then a SIGHUP every 5 ms until the process is gone: through the drain, the
    app's stop, `serve`'s return, `atexit` and the interpreter's own teardown."""
    config = tmp_path / "gw.toml"
    config.write_text(STORM_CONFIG)
    with open(tmp_path / "err.txt", "w+") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
            stdout=subprocess.PIPE, stderr=err, text=True,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                 "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                 **{name: str(tmp_path / name) for name in STORE_ENV}})
        try:
            first_line = process.stdout.readline()
            assert first_line.startswith("stepahead: serving on http://127.0.0.1:"), first_line
            url = first_line.split()[-1]   # the port the system gave: a fixed one may be taken
            assert httpx.get(url.removesuffix("/v1") + "/health", timeout=10).status_code == 200
            process.send_signal(signal.SIGTERM)
            deadline_s = time.monotonic() + 60
            while process.poll() is None and time.monotonic() < deadline_s:
                try:
                    process.send_signal(signal.SIGHUP)
                except ProcessLookupError:
                    break
                time.sleep(0.005)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        err.seek(0)
        text = err.read()
    assert process.returncode == 0, text[-3000:]   # not -1: death by SIGHUP (status 129 in a shell)
    assert HANGUP_WHILE_STOPPING in text and "Traceback" not in text
