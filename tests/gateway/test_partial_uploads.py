"""Uploads cut short by a kill -9 (QA121 L2): their bytes are written under a partial name,
locked by their writer, and the next start of a store on the directory removes those no
live writer holds (or renames into place one whose record was written); an upload being
written by another gateway sharing the directory is left alone."""
import asyncio
import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gateway.file_store import FileStore
from gateway.list_page import ListPage
from gateway.partial_files import PARTIAL_SUFFIX

REPO = Path(__file__).resolve().parents[2]
KILLED_MID_WRITE = textwrap.dedent("""
    import asyncio, io, os, signal, sys
    from pathlib import Path
    from gateway.file_store import FileStore

    class DiesMidWay(io.BytesIO):
        def read(self, size=-1):
            if self.tell() >= 1 << 20:   # one MiB written: the gateway is killed
                os.kill(os.getpid(), signal.SIGKILL)
            return super().read(size)

    store = FileStore(Path(sys.argv[1]))
    asyncio.run(store.add("a", "big.bin", "user_data", DiesMidWay(b"x" * (3 << 20))))
""")


def _aged(path, seconds: float = 600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _started(root) -> FileStore:
    """A store on `root` once its start-up sweep has run (its thread runs calls in order)."""
    store = FileStore(root)
    asyncio.run(store.list("a", None, ListPage()))
    return store


def _leftovers(root) -> list[str]:
    return sorted(path.name for path in root.glob("file-*"))


def test_an_upload_killed_mid_write_leaves_nothing_after_the_next_start(tmp_path):
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)], cwd=REPO, timeout=60)
    assert killed.returncode == -9
    left = list(tmp_path.glob("file-*"))
    assert len(left) == 1 and left[0].stat().st_size >= 1 << 20   # its bytes so far, never recorded
    store = _started(tmp_path)   # at once: a supervisor restarting it
    assert _leftovers(tmp_path) == []
    assert asyncio.run(store.stored_bytes("a")) == 0
    store.close()


def test_a_partial_file_still_written_or_just_made_is_left_alone(tmp_path):
    being_written = tmp_path / f"file-{'a' * 24}{PARTIAL_SUFFIX}"
    just_made = tmp_path / f"file-{'b' * 24}{PARTIAL_SUFFIX}"
    just_made.touch()   # empty and new: its writer may not have locked it yet
    with open(being_written, "wb") as writer:   # another gateway's upload, its lock held
        fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        writer.write(b"so far")
        writer.flush()
        _aged(being_written)
        _started(tmp_path).close()
        assert _leftovers(tmp_path) == sorted([being_written.name, just_made.name])
    _aged(just_made)   # both writers gone: the next start removes them
    _started(tmp_path).close()
    assert _leftovers(tmp_path) == []


def test_a_file_recorded_before_its_bytes_were_renamed_is_moved_into_place(tmp_path):
    store = FileStore(tmp_path)
    kept = asyncio.run(store.add_bytes("a", "x.txt", "user_data", b"kept"))
    store.close()
    partial = tmp_path / f"{kept.id}{PARTIAL_SUFFIX}"
    os.replace(tmp_path / kept.id, partial)   # the writer died between its record and the rename
    _aged(partial)
    store = _started(tmp_path)
    assert asyncio.run(store.read("a", kept.id)) == b"kept"
    assert _leftovers(tmp_path) == [kept.id]
    store.close()


def test_uploads_leave_no_partial_file(tmp_path):
    store = FileStore(tmp_path)
    kept = asyncio.run(store.add_bytes("a", "x.txt", "user_data", b"x"))
    assert _leftovers(tmp_path) == [kept.id] and (tmp_path / kept.id).stat().st_mode & 0o777 == 0o600
    store.close()


def test_an_upload_failing_after_its_record_leaves_neither_record_nor_bytes(tmp_path, monkeypatch):
    store = FileStore(tmp_path)
    asyncio.run(store.list("a", None, ListPage()))

    def no_rename(source, target):
        raise OSError("rename failed")
    monkeypatch.setattr("gateway.file_store.os.replace", no_rename)
    try:
        asyncio.run(store.add_bytes("a", "x.txt", "user_data", b"x"))
    except Exception as failed:
        assert "rename failed" in str(failed)
    else:
        raise AssertionError("the upload did not fail")
    assert _leftovers(tmp_path) == [] and asyncio.run(store.list("a", None, ListPage()))[0] == []
    store.close()
