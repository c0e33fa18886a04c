"""Partial files of saves cut by a kill (QA175 #3): `.<name>.partial<pid>` beside the file
(cache/atomic_file.py) were never removed. A start that holds the forecasters' directory
removes those whose process is gone, never one a live process is writing, and never
another file."""
import os
import subprocess
import sys
from types import SimpleNamespace

from cache.atomic_file import replacing, sweep_partial_files


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    return int(ended.stdout)


def test_partial_files_of_ended_processes_are_removed_and_those_of_live_ones_kept(tmp_path):
    dead = tmp_path / f".t1.json.partial{_dead_pid()}"
    own = tmp_path / f".t2.npz.partial{os.getpid()}"   # an earlier process of this pid (a container's pid 1)
    live_writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".t3.json.partial{live_writer.pid}"
        others = [tmp_path / "t1.json", tmp_path / ".hidden", tmp_path / "x.partial1", tmp_path / ".a.partialx"]
        for path in (dead, own, live, *others):
            path.write_text("{")
        folder = tmp_path / f".d.partial{_dead_pid()}"
        folder.mkdir()   # not a file: left
        assert sweep_partial_files(tmp_path) == 2
        assert not dead.exists() and not own.exists()
        assert live.exists() and folder.is_dir() and all(path.exists() for path in others)
    finally:
        live_writer.kill()
        live_writer.wait()


def test_a_writer_killed_but_not_yet_reaped_counts_as_gone(tmp_path):
    """A zombie still answers a signal; its partial file is left by a process that has
    exited all the same (cache/process_state.py reads its state)."""
    import time

    from cache.process_state import process_runs

    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        writer.kill()
        for _ in range(500):   # until it is a zombie: exited, not reaped (no wait() yet)
            if not process_runs(writer.pid):
                break
            time.sleep(0.01)
        os.kill(writer.pid, 0)   # signalling it still succeeds
        partial = tmp_path / f".t.json.partial{writer.pid}"
        partial.write_text("{")
        assert sweep_partial_files(tmp_path) == 1 and not partial.exists()
    finally:
        writer.wait()


def test_a_missing_directory_has_nothing_to_sweep(tmp_path):
    assert sweep_partial_files(tmp_path / "missing") == 0


def test_the_partial_file_a_save_writes_is_the_name_the_sweep_looks_for(tmp_path):
    """A save cut short (here by an exception, after which `replacing` removes its own;
    a kill leaves it): while it is written, its partial file is what the sweep matches."""
    target = tmp_path / "tenant.json"
    with replacing(target) as out:
        out.write("{}")
        [partial] = [p for p in tmp_path.iterdir() if p.name != "tenant.json"]
        assert partial.name == f".tenant.json.partial{os.getpid()}"
    assert target.read_text() == "{}"


def test_a_start_that_claims_the_predictor_directory_removes_saves_cut_short(tmp_path, monkeypatch, caplog):
    from gateway.forecasting import GAPS_DIR
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting
    from tests.gateway.test_forecasting import RecordingEngine
    from tests.gateway.test_forecasting_start import _Tracer

    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    (tmp_path / GAPS_DIR).mkdir()
    cut = [tmp_path / f".t.npz.partial{_dead_pid()}", tmp_path / GAPS_DIR / f".t.json.partial{_dead_pid()}"]
    for path in cut:
        path.write_bytes(b"cut short")
    backends = {"m": SimpleNamespace(engine=RecordingEngine("predictive"))}
    with caplog.at_level("WARNING", logger="stepahead"):
        relay = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)
    try:
        assert relay.claim.held and not any(path.exists() for path in cut)
        assert (f"stepahead: warning: removed 2 partial file(s) of forecast saves cut short (a gateway was killed "
                f"while saving) from {tmp_path}") in caplog.messages
        # a gateway that does not hold the directory leaves the partial files alone
        planted = tmp_path / f".u.npz.partial{_dead_pid()}"
        planted.write_bytes(b"cut short")
        second = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)
        assert not second.claim.held and planted.exists()
        stop_forecasting(second)
    finally:
        stop_forecasting(relay)
