"""A process whose engine stopped exits promptly while the workers' fork server is stopped
(SIGSTOP): multiprocessing's exit hook joined every worker it still tracked with no
timeout, and a forked worker's status comes only from that server, so the gateway said
"Finished server process" and never exited until the server was resumed; a restart's spawn
that waited on the server then ran once it was, after the stop, and failed with a
traceback (QA140 H1)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cache.process_state import process_runs

REPO = Path(__file__).resolve().parents[2]
START_AND_STOP_S = 120   # the engines' start (the fork server imports torch) and its stop, on a loaded machine
EXIT_AFTER_STOP_S = 10   # far more than an exit takes (0.2 s measured); the old code never exited

ENGINES_STOPPED_WITH_THEIR_FORK_SERVER = """
import asyncio, json, os, signal, sys
from multiprocessing import forkserver
import shards.engine, shards.local_transport
from shards.engine import LocalEngine

# waits for what never comes while the server is stopped, shortened: a worker's exit status
# (2 s after its pipe closed) and the restart's spawn (5 s into the stop)
shards.local_transport.JOIN_AFTER_EOF_S = 0.2
shards.engine.STOP_TIMEOUT_S = 2.0

async def main(pids_path):
    # two models' engines on one fork server (one start of it, not one a case): one idle,
    # one whose worker dies while the server is stopped, its restart's spawn waiting on it
    idle, restarting = (LocalEngine("tiny", num_workers=1, num_hot_blocks=64, threads_per_worker=1)
                        for _ in range(2))
    for engine in (idle, restarting):
        await engine.start()
    told = asyncio.Event()
    loop = asyncio.get_running_loop()
    restarting.on_worker_event = lambda line: "restarting it in" in line and loop.call_soon_threadsafe(told.set)
    workers = [engine.worker_pid("w0") for engine in (idle, restarting)]
    server = forkserver._forkserver._forkserver_pid
    with open(pids_path, "w") as pids:
        json.dump({"server": server, "workers": workers}, pids)
    os.kill(server, signal.SIGSTOP)
    os.kill(workers[1], signal.SIGKILL)
    await asyncio.wait_for(told.wait(), 60)
    await asyncio.sleep(1.0)   # the restart is due 0.2 s after, at the next 0.5 s tick: its spawn waits
    for engine in (idle, restarting):
        await engine.stop()
    print("stopped", flush=True)

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_the_process_exits_after_its_stop_while_the_fork_server_is_stopped_with_an_idle_worker_and_a_restart_waiting(
        tmp_path):
    pids_path, stderr_path = tmp_path / "pids.json", tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:   # a file, not a pipe: the stopped server holds its copy open
        gateway = subprocess.Popen([sys.executable, "-c", ENGINES_STOPPED_WITH_THEIR_FORK_SERVER, str(pids_path)],
                                   cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    pids: dict = {}
    try:
        deadline = time.monotonic() + START_AND_STOP_S
        line = gateway.stdout.readline()   # the stop returned (or the process ended: EOF)
        assert line == "stopped\n", f"no stop: {line!r} {stderr_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline
        pids = json.loads(pids_path.read_text())
        stopped_at = time.monotonic()
        try:
            gateway.wait(EXIT_AFTER_STOP_S)
        except subprocess.TimeoutExpired:
            pass
        assert gateway.poll() is not None, f"running {EXIT_AFTER_STOP_S} s after its stop (fork server stopped)"
        exit_s = time.monotonic() - stopped_at
        assert gateway.returncode == 0, stderr_path.read_text()[-3000:]
        assert exit_s < EXIT_AFTER_STOP_S
        server = pids["server"]
        assert process_runs(server)   # still stopped (the test's doing): the exit did not wait on it
        os.kill(server, signal.SIGCONT)   # now it runs: it ends (its gateway is gone), forking nothing more
        end = time.monotonic() + 20
        while process_runs(server) and time.monotonic() < end:
            time.sleep(0.05)
        assert not process_runs(server)
        assert not any(process_runs(worker) for worker in pids["workers"])
        assert "Traceback" not in stderr_path.read_text()   # no spawn ran late, after the exit
    finally:
        if pids.get("server") is None and pids_path.exists():
            pids = json.loads(pids_path.read_text() or "{}")
        end_all(gateway, pids.get("server"), *pids.get("workers", ()))


def end_all(process: subprocess.Popen, *pids: int | None) -> None:
    """Resume, then kill, each of `pids` (a stopped fork server, a child of it), then
    `process` if it still runs; close its stdout."""
    for pid in pids:
        if pid:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
    if process.poll() is None:
        process.kill()
        process.wait(10)
    process.stdout.close()
