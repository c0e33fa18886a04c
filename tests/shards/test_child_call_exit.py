"""A process whose child call was cancelled while the fork server is stopped (SIGSTOP)
exits promptly: the killed child's status comes from that server only, and
multiprocessing's exit hook joined the child with no timeout, so the process never
exited until the server was resumed (the gap QA140 H1 found for workers, in the start's
model preparation)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cache.process_state import process_runs
from tests.shards.test_exit_with_fork_server_stopped import end_all

REPO = Path(__file__).resolve().parents[2]
CALL_STARTS_S = 120   # the fork server starts and the child writes its pid, on a loaded machine
EXIT_AFTER_RETURN_S = 15   # the call's own join after the kill (0.5 s here) and far more; the old code never exited

CALL_CANCELLED_WITH_ITS_FORK_SERVER_STOPPED = """
import json, os, signal, sys, threading, time
from multiprocessing import forkserver
import shards.child_call
from shards.child_call import call_in_child
from shards.local_transport import fork_server_context
from shards.transport import StartCancelled

pid_file, pids_path = sys.argv[1], sys.argv[2]
cancelled, outcome = threading.Event(), {}
# the subject is the exit, not the server's seconds of importing torch, nor the call's join
# of the killed child (5 s, for a status that cannot come while the server is stopped)
context = fork_server_context()
context.set_forkserver_preload(["shards.fork_server_signals"])
shards.child_call.JOIN_AFTER_KILL_S = 0.5

def call():
    try:
        call_in_child(context, "tests.shards.test_child_call", "_write_pid_and_sleep",
                      (pid_file, 300.0), cancelled)
    except StartCancelled as exc:
        outcome["cancelled"] = str(exc)

caller = threading.Thread(target=call)
caller.start()
while not (os.path.exists(pid_file) and open(pid_file).read()):
    time.sleep(0.05)
server = forkserver._forkserver._forkserver_pid
with open(pids_path, "w") as pids:
    json.dump({"server": server, "child": int(open(pid_file).read())}, pids)
os.kill(server, signal.SIGSTOP)
cancelled.set()
caller.join()
print("returned", outcome.get("cancelled", "not cancelled"), flush=True)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_the_process_exits_after_a_cancelled_call_while_the_fork_server_is_stopped(tmp_path):
    pid_file, pids_path, stderr_path = tmp_path / "pid", tmp_path / "pids.json", tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:   # a file, not a pipe: the stopped server holds its copy open
        caller = subprocess.Popen([sys.executable, "-c", CALL_CANCELLED_WITH_ITS_FORK_SERVER_STOPPED,
                                   str(pid_file), str(pids_path)],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(REPO)))
    pids: dict = {}
    try:
        started = time.monotonic()
        line = caller.stdout.readline()
        assert line.startswith("returned ") and "was stopped before it finished" in line, \
            (line, stderr_path.read_text()[-3000:])
        assert time.monotonic() - started < CALL_STARTS_S + EXIT_AFTER_RETURN_S
        pids = json.loads(pids_path.read_text())
        assert not process_runs(pids["child"])   # killed, though its status cannot come
        try:
            caller.wait(EXIT_AFTER_RETURN_S)
        except subprocess.TimeoutExpired:
            pass
        assert caller.poll() is not None, f"running {EXIT_AFTER_RETURN_S} s after the call returned"
        assert caller.returncode == 0, stderr_path.read_text()[-3000:]
        assert process_runs(pids["server"])   # still stopped (the test's doing): the exit did not wait on it
    finally:
        if not pids and pids_path.exists():
            pids = json.loads(pids_path.read_text() or "{}")
        end_all(caller, pids.get("server"), pids.get("child"))
