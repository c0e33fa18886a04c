"""Local worker processes: forked from the preloaded fork server on the CPU, spawned on a
GPU; a forked worker takes the gateway's environment of the moment; workers never
outlive a gateway killed outright."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shards.local_transport import FORK_SERVER_PRELOAD, LocalTransport, adopt_environment, fork_server_context
from shards.model_files import ModelLoadError
from shards.model_loader import choose_dtype
from shards.worker import WorkerConfig

REPO = Path(__file__).resolve().parents[2]


def test_cpu_workers_fork_from_the_server_and_gpu_workers_spawn_unless_told():
    auto, spawned = LocalTransport(), LocalTransport(start_method="spawn")
    assert auto.start_method(WorkerConfig(model="tiny", device="cpu")) == "forkserver"
    assert spawned.start_method(WorkerConfig(model="tiny", device="cpu")) == "spawn"
    for device in ("cuda", "cuda:1"):
        assert auto.start_method(WorkerConfig(model="tiny", device=device)) == "spawn"
        assert LocalTransport("forkserver").start_method(WorkerConfig(model="tiny", device=device)) == "forkserver"
    with pytest.raises(ValueError, match="start_method must be one of auto, forkserver, spawn"):
        LocalTransport(start_method="fork")


def _report_environment(environ, out) -> None:
    adopt_environment(environ)
    out.send(dict(os.environ))
    out.close()


def test_a_forked_process_takes_the_environment_it_is_given_not_the_servers(monkeypatch):
    ctx = fork_server_context()
    warm = ctx.Process(target=os.getpid)    # the server runs from here on, with today's environment
    warm.start()
    warm.join(120)
    monkeypatch.setenv("STEPAHEAD_TEST_SET_AFTER_THE_SERVER", "yes")
    monkeypatch.delenv("HOME", raising=False)
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_report_environment, args=(dict(os.environ), writer))
    child.start()
    writer.close()
    seen = reader.recv()
    child.join(30)
    assert seen == dict(os.environ)
    assert seen["STEPAHEAD_TEST_SET_AFTER_THE_SERVER"] == "yes" and "HOME" not in seen


@pytest.mark.parametrize("start_method", ["auto", "spawn"])
def test_a_call_in_a_child_runs_in_another_process_with_the_callers_environment(monkeypatch, start_method):
    transport = LocalTransport(start_method)
    monkeypatch.setenv("STEPAHEAD_TEST_CHILD_CALL", "from the parent")
    assert transport.call_in_child("cpu", "os", "getenv", ("STEPAHEAD_TEST_CHILD_CALL",)) == "from the parent"
    assert transport.call_in_child("cpu", "os", "getpid", ()) != os.getpid()


def test_preparing_a_model_in_a_child_settles_auto_as_this_process_would_and_raises_its_errors(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")   # what check_model looks for in a model directory
    (tmp_path / "tokenizer.json").write_text("{}")
    transport = LocalTransport()
    assert transport.prepare_model(str(tmp_path), "cpu", "auto") == choose_dtype("auto", str(tmp_path), "cpu")
    assert transport.prepare_model("tiny", "cpu", "auto") == "float32"
    assert transport.prepare_model(str(tmp_path), "cpu", "float16") == "float16"
    with pytest.raises(ModelLoadError, match="neither 'smollm2', 'tiny'"):
        transport.prepare_model(str(tmp_path / "missing"), "cpu", "auto")
    def no_child(*args):
        raise AssertionError("a child process was started")

    monkeypatch.setattr(LocalTransport, "call_in_child", no_child)
    spawned = LocalTransport(start_method="spawn")   # workers spawn and this process has torch: prepared here
    assert spawned.prepare_model(str(tmp_path), "cpu", "auto") == choose_dtype("auto", str(tmp_path), "cpu")
    with pytest.raises(ModelLoadError, match="neither 'smollm2', 'tiny'"):
        spawned.prepare_model(str(tmp_path / "missing"), "cpu", "auto")


def _ignores(pid: int | str, signum: int) -> bool:
    mask = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask.split()[1], 16) & (1 << (signum - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal dispositions from /proc")
def test_the_fork_server_and_what_it_forks_ignore_ctrl_c_and_a_group_sigterm_or_sighup_from_its_first_import_on():
    from multiprocessing import forkserver

    assert FORK_SERVER_PRELOAD[0] == "shards.fork_server_signals"
    transport = LocalTransport()
    child_pid, child_ignores = transport.call_in_child("cpu", "tests.shards.test_local_transport",
                                                       "_own_pid_and_signals_ignored", ())
    assert child_pid != os.getpid() and child_ignores == (True, True, True)
    server_pid = forkserver._forkserver._forkserver_pid
    assert all(_ignores(server_pid, signum) for signum in GROUP_SIGNALS)
    assert not _ignores("self", signal.SIGINT) and not _ignores("self", signal.SIGTERM)   # this process keeps them


GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # what a terminal or systemd sends a whole group


def _own_pid_and_signals_ignored() -> tuple[int, tuple[bool, ...]]:
    return os.getpid(), tuple(_ignores("self", signum) for signum in GROUP_SIGNALS)


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_workers_exit_when_the_gateway_process_is_killed_outright():
    script = textwrap.dedent("""
        import asyncio, sys
        from shards.engine import LocalEngine

        async def main():
            eng = LocalEngine("tiny", num_workers=2, num_hot_blocks=64, threads_per_worker=1)
            await eng.start()
            print(" ".join(str(eng.worker_pid(w)) for w in ("w0", "w1")), flush=True)
            await asyncio.sleep(600)

        if __name__ == "__main__":
            asyncio.run(main())
    """)
    gateway = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        workers = [int(pid) for pid in gateway.stdout.readline().split()]
        assert len(workers) == 2 and all(_running(pid) for pid in workers)
        server = _parent_of(workers[0])
        assert server != gateway.pid and _parent_of(workers[1]) == server  # both from one fork server
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_running(pid) for pid in [server, *workers]):
            time.sleep(0.1)
        assert not any(_running(pid) for pid in [server, *workers])
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.stdout.close()


STOP_IDLE_FORK_SERVER = """
import time
from multiprocessing import forkserver
from shards.local_transport import fork_server_context, stop_fork_server_if_idle
from cache.process_state import process_runs

context = fork_server_context()
context.set_forkserver_preload([])   # the subject is the server's lifetime, not its seconds of imports
child = context.Process(target=time.sleep, args=(30,))
child.start()
server = forkserver._forkserver._forkserver_pid
assert not stop_fork_server_if_idle()   # a child of it runs: left alone
assert process_runs(server) and child.is_alive()
child.kill()
child.join()
assert stop_fork_server_if_idle()   # nothing of this process runs from it now: killed
deadline = time.monotonic() + 10
while process_runs(server) and time.monotonic() < deadline:
    time.sleep(0.05)
assert not process_runs(server)
print("ok")
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_an_idle_fork_server_is_killed_for_a_cancelled_start_and_a_busy_one_is_not():
    done = subprocess.run([sys.executable, "-c", STOP_IDLE_FORK_SERVER], capture_output=True, text=True,
                          timeout=240, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
