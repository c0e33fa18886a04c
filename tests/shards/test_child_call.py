"""A call in a child process: its value or exception come back, and a cancel kills it."""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from shards.child_call import call_in_child
from shards.local_transport import fork_server_context
from cache.process_state import process_runs
from shards.transport import StartCancelled


CONTEXTS = {"forkserver": fork_server_context, "spawn": lambda: mp.get_context("spawn")}


class Unpicklable(Exception):
    def __reduce__(self):
        raise pickle.PicklingError("not this one")


def _raise_unpicklable():
    raise Unpicklable("held a lock")


def _exit_at_once(status: int):
    os._exit(status)


def _write_pid_and_sleep(path: str, seconds: float):
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_the_childs_value_and_exception_come_back_as_they_are(context):
    ctx, never = CONTEXTS[context](), threading.Event()
    assert call_in_child(ctx, "math", "gcd", (12, 18), never) == 6
    assert call_in_child(ctx, "os", "getpid", (), never) != os.getpid()
    with pytest.raises(ValueError, match="math domain error"):
        call_in_child(ctx, "math", "sqrt", (-1,), never)


def test_an_exception_that_cannot_travel_comes_back_as_a_runtime_error_naming_it():
    with pytest.raises(RuntimeError, match="cannot be sent back: Unpicklable"):
        call_in_child(fork_server_context(), __name__, "_raise_unpicklable", (), threading.Event())


def test_a_child_that_dies_without_a_word_raises_child_process_error_with_its_status():
    with pytest.raises(ChildProcessError, match=r"exited \(exit status 3\)"):
        call_in_child(fork_server_context(), __name__, "_exit_at_once", (3,), threading.Event())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_cancel_kills_the_child_at_once_and_raises_start_cancelled(tmp_path):
    cancelled, pid_file, outcome = threading.Event(), tmp_path / "pid", {}

    def call():
        try:
            outcome["value"] = call_in_child(fork_server_context(), __name__, "_write_pid_and_sleep",
                                             (str(pid_file), 120.0), cancelled)
        except BaseException as exc:   # noqa: BLE001 — the test looks at it
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the child never ran"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    assert process_runs(pid)
    cancelled_at = time.monotonic()
    cancelled.set()
    caller.join(30)
    assert not caller.is_alive()
    assert isinstance(outcome.get("error"), StartCancelled), outcome
    assert time.monotonic() - cancelled_at < 10   # not the 120 s the call would have taken
    assert not process_runs(pid)


def test_a_call_made_after_the_cancel_never_runs(tmp_path):
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(StartCancelled):
        call_in_child(fork_server_context(), __name__, "_write_pid_and_sleep", (str(tmp_path / "pid"), 120.0),
                      cancelled)
    assert not (tmp_path / "pid").exists()


def _signal_self_and_answer(signums: tuple[int, ...]) -> str:
    for signum in signums:
        os.kill(os.getpid(), signum)
    time.sleep(0.2)   # a pending signal's default action (death) would have come by now
    return "still here"


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_a_group_signal_does_not_end_the_call_the_caller_decides(context):
    """Ctrl+C, and a SIGTERM or SIGHUP sent to the whole process group (a terminal's
    hang-up, a service manager's stop), reach the child too: it ignores them (FI46 found
    the model preparation's child ignored SIGINT only, so a hang-up killed the start)."""
    import signal as signals
    signums = (signals.SIGINT, signals.SIGTERM, signals.SIGHUP)
    assert call_in_child(CONTEXTS[context](), __name__, "_signal_self_and_answer", (signums,),
                         threading.Event()) == "still here"
