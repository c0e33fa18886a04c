"""A SIGHUP right after the stop's SIGINT or SIGTERM never reloads, and the reload's line
is one write (QA145 findings 3 and 4)."""
from __future__ import annotations

import asyncio
import logging
import signal
import threading

import pytest

from gateway.app import build_app
from gateway.config import key_digest, load_config
from gateway.hangups_at_exit import HANGUP_WHILE_STOPPING
from gateway.reload import reload_on_hangup, reload_tenants
from gateway.stopping import hangups_ignored_once_stopping

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers: the main thread")

MODEL = '''[[models]]
name = "mock"
kind = "upstream"
litellm_model = "openai/gpt-4o-mini"
litellm_params = { mock_response = "hi" }
'''


def _config(name: str, key: str) -> str:
    return MODEL + f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(key)}"]\n'


@pytest.fixture
def server_signals():
    """SIGINT's and SIGTERM's handlers as uvicorn's (recording), put back after."""
    seen: list[int] = []
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in before:
        signal.signal(signum, lambda sig, frame: seen.append(sig))
    yield seen
    for signum, handler in before.items():
        signal.signal(signum, handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


async def _settled() -> None:
    """Every task the loop has, but this one, done."""
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.gather(*(task for task in asyncio.all_tasks() if task is not asyncio.current_task()))


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_sighup_the_loop_serves_right_after_the_stops_signal_is_ignored_not_a_reload(
        tmp_path, caplog, server_signals, stop_signal):
    """Known answer (QA145): the stop's handler only asked the loop to swap SIGHUP's handler;
    a SIGHUP the loop served before that step reloaded the tenants."""
    path = tmp_path / "gw.toml"
    path.write_text(_config("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(_config("b", "sk-b"))
    stops: list[str] = []

    async def stop_then_hang_up() -> None:
        reloads = reload_on_hangup(state, str(path))
        unchain = hangups_ignored_once_stopping(asyncio.get_running_loop(), lambda: stops.append("began"))
        try:
            signal.getsignal(stop_signal)(stop_signal, None)   # the signal's handler, as Python runs it
            reloads._on_hangup()   # a SIGHUP the loop serves before the step the handler asked for
            await _settled()
        finally:
            reloads.remove()
            unchain()

    with caplog.at_level(logging.WARNING):
        asyncio.run(stop_then_hang_up())
    assert server_signals == [stop_signal] and stops == ["began"]   # the server's handler still ran
    assert state.keys.tenant_for_key("sk-b") is None and state.keys.tenant_for_key("sk-a") == "a"   # not reloaded
    assert [r.getMessage() for r in caplog.records].count(HANGUP_WHILE_STOPPING) == 1


def test_a_sighup_served_before_the_stop_still_reloads_and_one_queued_past_removal_does_not(
        tmp_path, caplog, server_signals):
    path = tmp_path / "gw.toml"
    path.write_text(_config("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(_config("b", "sk-b"))

    async def hang_up_then_remove() -> None:
        reloads = reload_on_hangup(state, str(path))
        unchain = hangups_ignored_once_stopping(asyncio.get_running_loop())
        try:
            reloads._on_hangup()   # no stop began: a reload
            await _settled()
            path.write_text(_config("c", "sk-c"))
        finally:
            reloads.remove()
            unchain()
        reloads._on_hangup()   # queued by the loop before the removal, served after it (the lifespan's end)
        await _settled()

    with caplog.at_level(logging.WARNING):
        asyncio.run(hang_up_then_remove())
    assert state.keys.tenant_for_key("sk-b") == "b" and state.keys.tenant_for_key("sk-c") is None
    assert [r.getMessage() for r in caplog.records].count(HANGUP_WHILE_STOPPING) == 1


class Writes:
    """A stderr that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_the_reload_line_is_one_write_so_no_other_threads_output_lands_inside_it(tmp_path, monkeypatch):
    """Known answer (QA145): print() wrote the text, then "\\n": a thread's line written
    between the two was glued to it."""
    path = tmp_path / "gw.toml"
    path.write_text(_config("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(_config("b", "sk-b"))
    stderr = Writes()
    monkeypatch.setattr("sys.stderr", stderr)
    report = asyncio.run(reload_tenants(state, path))
    assert stderr.writes == [report.line(path) + "\n"]
