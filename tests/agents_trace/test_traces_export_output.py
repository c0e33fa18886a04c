"""`stepahead traces export -o`: a regular file is replaced whole, anything else (a FIFO,
a device, `/dev/stdout`) written into, a symlink's target written, `-` is stdout, and the
store being read (or a file of it) is refused, so an export never destroys the store."""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading

import pytest

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.agents_trace.test_traces_command import _run


@pytest.fixture
def store(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "only"})
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def _num_sessions(store) -> int:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT count(*) FROM sessions").fetchone()[0]


@pytest.mark.parametrize("name", ["{store}", "{store}-wal", "{store}-shm", "link-to-store", "hard-link"])
@pytest.mark.parametrize("which", [["--all"], ["--session", "only"]], ids=["all", "session"])
def test_export_onto_the_store_it_reads_is_refused_and_the_store_kept(store, tmp_path, capsys, name, which):
    os.link(store, tmp_path / "hard-link")
    (tmp_path / "link-to-store").symlink_to(store)
    before = store.read_bytes()
    output = name.format(store=store) if "{" in name else str(tmp_path / name)
    assert _run(["traces", "export", *which, "--db", str(store), "-o", output]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepahead: cannot write {output}: it is the trace store being read") \
        and err.count("\n") == 1, err
    assert store.read_bytes() == before and _num_sessions(store) == 1
    assert os.path.islink(tmp_path / "link-to-store")


def test_export_into_a_fifo_writes_for_its_reader_and_keeps_the_fifo(store, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    assert _run(["traces", "export", "--session", "only", "--db", str(store), "-o", str(fifo)]) == 0
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    lines = received[0].splitlines()
    assert json.loads(lines[0])["format"] == "stepahead-trace/1" and len(lines) == 4


def test_export_into_a_device_writes_into_it(store, tmp_path, capsys):
    """`-o /dev/null` as root, with a null device node made in tmp_path."""
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", str(null)]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode), "the device node was replaced by a regular file"
    assert f"written to {null}" in capsys.readouterr().err


def test_export_through_a_symlink_writes_its_target_and_keeps_the_link(store, tmp_path, capsys):
    target = tmp_path / "exports" / "run.jsonl"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    assert _run(["traces", "export", "--session", "only", "--db", str(store), "-o", str(link)]) == 0
    assert link.is_symlink() and len(target.read_text().splitlines()) == 4


def test_export_to_dash_is_stdout(store, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and "written to" not in err
    assert not (tmp_path / "-").exists()
