"""One process at a time holds a directory's claim; a killed holder leaves none behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gateway.directory_claim import CLAIM_FILE, claim_directory

HOLDER = """
import sys, time
from pathlib import Path
from gateway.directory_claim import claim_directory
claim = claim_directory(Path(sys.argv[1]))
print("held" if claim.held else "refused", flush=True)
time.sleep(60)
"""


def test_a_second_claim_is_refused_and_names_the_holder_until_it_releases(tmp_path):
    directory = tmp_path / "predictor"
    first = claim_directory(directory)   # made when missing
    assert first.held and (directory / CLAIM_FILE).read_text() == f"{os.getpid()}\n"
    second = claim_directory(directory)
    assert not second.held and second.holder_pid == os.getpid()
    second.release()   # not held: nothing to give up
    assert claim_directory(directory).held is False
    first.release()
    first.release()   # once
    third = claim_directory(directory)
    assert third.held
    third.release()


def test_a_claim_held_by_another_process_is_refused_and_freed_when_it_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = claim_directory(tmp_path)
        assert not refused.held and refused.holder_pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        holder.stdout.close()
    deadline = time.monotonic() + 5
    claim = claim_directory(tmp_path)
    while not claim.held and time.monotonic() < deadline:   # the kernel drops the lock with the process
        time.sleep(0.05)
        claim = claim_directory(tmp_path)
    assert claim.held and (tmp_path / CLAIM_FILE).read_text() == f"{os.getpid()}\n"
    claim.release()


def test_a_claim_whose_pid_cannot_be_written_holds_nothing(tmp_path, monkeypatch):
    """A full disk as the claim writes its process id: the claim raises, and the lock is
    not left held by the open file the error's traceback keeps alive (QA175: every later
    background response of that gateway was refused as 'held by process None')."""
    import errno

    import gateway.directory_claim as directory_claim

    def no_space() -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    directory = tmp_path / "owners"
    with monkeypatch.context() as patched:
        patched.setattr(directory_claim.os, "getpid", no_space)
        with pytest.raises(OSError) as failed:
            claim_directory(directory)
    assert failed.value.errno == errno.ENOSPC   # (the traceback, kept here, holds the frame's file)
    again = claim_directory(directory)   # the disk has room again
    assert again.held and (directory / CLAIM_FILE).read_text() == f"{os.getpid()}\n"
    again.release()
