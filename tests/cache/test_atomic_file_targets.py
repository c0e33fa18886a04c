"""atomic_file.replacing replaces only a regular file (or makes a new one): a symlink's
target is replaced and the link kept; a device, a FIFO or a file reached through /proc
(`/dev/stdout`) is written into, never turned into a regular file.

Device nodes are made inside tmp_path (as root), never the machine's own /dev files."""
from __future__ import annotations

import errno
import os
import stat
import threading

import pytest

from cache.atomic_file import replacing


def _node(tmp_path, name: str, minor: int):
    """A character device node of the memory driver (1, minor) in tmp_path: 3 null, 7 full."""
    path = tmp_path / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_a_character_device_is_written_into_not_replaced(tmp_path):
    null = _node(tmp_path, "null", 3)
    with replacing(null, shared=True) as stream:
        stream.write("thrown away\n")
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device node was replaced by a regular file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]   # no partial file beside it


def test_a_full_device_is_an_oserror_naming_it_and_stays_a_device(tmp_path):
    full = _node(tmp_path, "full", 7)
    with pytest.raises(OSError) as raised:
        with replacing(full) as stream:
            stream.write("x" * 100)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(full)
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_a_fifo_is_written_into_for_its_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    with replacing(fifo) as stream:
        stream.write("line 1\nline 2\n")
    reader.join(timeout=10)
    assert received == ["line 1\nline 2\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_keeps_being_a_link_and_its_target_gets_the_content(tmp_path):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "trace.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    with replacing(link) as stream:
        stream.write("new\n")
        assert target.read_text() == "old\n"   # still whole or not at all
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["trace.jsonl"]


def test_a_dangling_symlink_makes_its_target(tmp_path):
    link = tmp_path / "out.jsonl"
    link.symlink_to(tmp_path / "made.jsonl")
    with replacing(link) as stream:
        stream.write("new\n")
    assert link.is_symlink() and (tmp_path / "made.jsonl").read_text() == "new\n"


def test_a_loop_of_links_is_an_oserror_naming_the_path(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError) as raised:
        with replacing(tmp_path / "a") as stream:
            stream.write("never")
    assert raised.value.filename == str(tmp_path / "a")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def test_a_file_named_through_proc_is_written_into_its_descriptor_kept(tmp_path):
    """`-o /dev/stdout` with stdout a file: the file the descriptor holds gets the text (as
    `> /dev/stdout` does), not a new file the descriptor never sees."""
    out = tmp_path / "stdout.txt"
    out.write_text("old content\n")
    with open(out, "r+") as held:
        inode = os.fstat(held.fileno()).st_ino
        with replacing(f"/proc/self/fd/{held.fileno()}") as stream:
            stream.write("new\n")
        assert os.stat(out).st_ino == inode   # the same file, written in place
        assert held.read() == "new\n"
