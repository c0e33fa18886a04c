"""Owners of unfinished background responses: one store sees another's claim while it is
held, and a released (or never claimed, or malformed) owner as gone, for good."""
from __future__ import annotations

from gateway.response_owners import ResponseOwners


def test_an_owner_lives_while_its_claim_is_held_and_stays_gone_after(tmp_path):
    archive = tmp_path / "responses.sqlite3"
    running, reading = ResponseOwners(archive), ResponseOwners(archive)
    assert running.owner != reading.owner
    running.claim()
    running.claim()   # idempotent
    lock = tmp_path / "responses.sqlite3.owners" / f"{running.owner}.lock"
    assert lock.exists()
    assert reading.lives(running.owner) and running.lives(running.owner)
    running.release()
    assert not lock.exists()
    assert not reading.lives(running.owner)
    running.claim()   # the same name claimed again: the reader found it gone once, and it stays gone
    assert not reading.lives(running.owner)
    running.release()


def test_names_that_are_no_owner_and_a_file_in_memory_have_no_living_owner(tmp_path):
    owners = ResponseOwners(tmp_path / "responses.sqlite3")
    for name in (None, 42, "../../etc/passwd", "123-xyz", f"{owners.owner}x"):
        assert not owners.lives(name)
    in_memory, other = ResponseOwners(None), ResponseOwners(tmp_path / "responses.sqlite3")
    in_memory.claim()   # nothing to claim: no other process reads a file in memory
    other.claim()
    assert in_memory.lives(in_memory.owner) and not in_memory.lives(other.owner)
    other.release()
