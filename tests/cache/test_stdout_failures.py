"""stdout_reader: a stdout that fails other than by its reader leaving (a full disk, a
closed stdout) ends the command with one line on stderr and exit 74, no traceback; an
OSError of anything else the command does passes through."""
from __future__ import annotations

import errno
import io
import os
import stat
import subprocess
import sys

import pytest

from cache.stdout_reader import quiet_when_reader_leaves

SCRIPT = """
import sys
from cache.stdout_reader import quiet_when_reader_leaves
def command():
    print("short")
    return 0
sys.exit(quiet_when_reader_leaves(command))
"""


class FullStream(io.StringIO):
    """A stdout on a full disk: every flush fails with ENOSPC."""

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_stdout_on_a_full_disk_is_one_line_and_exit_74(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", FullStream())
    assert quiet_when_reader_leaves(lambda: print("table") or 0) == 74
    assert capsys.readouterr().err == "stepahead: cannot write to stdout: No space left on device\n"


def test_another_oserror_of_the_command_passes_through(capsys):
    def command() -> int:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nowhere")
    with pytest.raises(FileNotFoundError):
        quiet_when_reader_leaves(command)


def test_a_closed_stdout_is_one_line_and_exit_74_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", SCRIPT], stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (74, "stepahead: cannot write to stdout: stdout is closed\n")


def test_a_closed_stdout_is_no_failure_for_a_command_printing_nothing():
    script = SCRIPT.replace('    print("short")\n', "")
    done = subprocess.run([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (0, "")


def test_a_full_device_as_stdout_is_one_line_and_exit_74(tmp_path):
    """`> /dev/full`, with a node of that device made in tmp_path (root only)."""
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    with open(full, "w") as stdout:
        done = subprocess.run([sys.executable, "-c", SCRIPT], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    assert (done.returncode, done.stderr) == (74, "stepahead: cannot write to stdout: No space left on device\n")


def test_the_simulator_names_itself_when_its_stdout_fails(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"timestamp": {t}, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}}\n'
                             for t in (0, 10)))
    done = subprocess.run([sys.executable, "-m", "cache.sim", "--trace", str(trace), "--hot-blocks", "4", "--json"],
                          stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (74, "python -m cache.sim: cannot write to stdout: stdout is closed\n")
