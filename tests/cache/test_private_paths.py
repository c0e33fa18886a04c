"""What holds tenants' data is private to the gateway's user whatever the umask: files
made 0600, directories made 0700; what exists already keeps its mode."""
from __future__ import annotations

import os
import stat

import pytest

from cache.atomic_file import replacing
from cache.private_paths import create_private_file, make_private_dirs, private_opener
from cache.sqlite_file import SqliteFile


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_every_directory_made_is_private_and_one_already_there_keeps_its_mode(tmp_path, umask_022):
    (tmp_path / "operator").mkdir()
    os.chmod(tmp_path / "operator", 0o751)
    make_private_dirs(tmp_path / "operator" / "a" / "b")
    make_private_dirs(tmp_path / "operator" / "a" / "b")   # already there: nothing to do
    assert [mode(tmp_path / "operator"), mode(tmp_path / "operator" / "a"),
            mode(tmp_path / "operator" / "a" / "b")] == [0o751, 0o700, 0o700]


def test_directories_fail_as_mkdir_fails(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(NotADirectoryError):
        make_private_dirs(tmp_path / "a-file" / "under")
    with pytest.raises(FileExistsError):
        make_private_dirs(tmp_path / "a-file")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_parent_that_refuses_children_is_one_not_found_error_not_an_endless_retry():
    # /proc is there, yet mkdir under it says "not found": each retry used to recurse (RecursionError)
    with pytest.raises(FileNotFoundError):
        make_private_dirs("/proc/stepahead-test-missing/state")


def test_a_file_is_made_private_and_one_already_there_is_left_as_it_is(tmp_path, umask_022):
    assert create_private_file(tmp_path / "new") and mode(tmp_path / "new") == 0o600
    (tmp_path / "old").write_text("kept")
    os.chmod(tmp_path / "old", 0o640)
    assert not create_private_file(tmp_path / "old")
    assert mode(tmp_path / "old") == 0o640 and (tmp_path / "old").read_text() == "kept"
    with open(tmp_path / "upload", "wb", opener=private_opener) as out:
        out.write(b"bytes")
    with open(tmp_path / "old", "a", opener=private_opener) as out:
        out.write("!")
    assert mode(tmp_path / "upload") == 0o600 and (tmp_path / "upload").read_bytes() == b"bytes"
    assert mode(tmp_path / "old") == 0o640 and (tmp_path / "old").read_text() == "kept!"


def test_a_file_written_whole_is_made_private_and_a_replaced_one_keeps_its_mode(tmp_path, umask_022):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    (tmp_path / f".{new.name}.partial{os.getpid()}").write_text("left by a process of this pid")   # 0644
    with replacing(new) as stream:
        stream.write("{}")
    old.write_text("{}")
    os.chmod(old, 0o640)
    with replacing(old, binary=True) as stream:
        stream.write(b"[]")
    assert (mode(new), new.read_text(), mode(old), old.read_text()) == (0o600, "{}", 0o640, "[]")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "old.json"]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_shared_file_written_whole_gets_the_umasks_mode(tmp_path, umask):
    """For the cache directory's files, which other users may read."""
    before = os.umask(umask)
    try:
        with replacing(tmp_path / "costs.json", shared=True) as stream:
            stream.write("{}")
    finally:
        os.umask(before)
    assert mode(tmp_path / "costs.json") == 0o666 & ~umask


def assert_private_database(path) -> None:
    """`path`, its -wal and -shm are the only things in its directory, 0600, the directory 0700."""
    assert {p.name: mode(p) for p in path.parent.iterdir()} == {
        path.name: 0o600, f"{path.name}-wal": 0o600, f"{path.name}-shm": 0o600}
    assert mode(path.parent) == 0o700


def test_a_sqlite_file_made_here_is_private_with_its_wal_and_shm(tmp_path, umask_022):
    path = tmp_path / "data" / "store.sqlite3"
    file = SqliteFile(path, "the test store", "CREATE TABLE IF NOT EXISTS t (x TEXT);")
    file.change("INSERT INTO t VALUES ('a tenant''s prompt')")
    try:
        assert_private_database(path)
    finally:
        file.close()


def test_a_sqlite_file_already_there_keeps_its_mode_and_gives_it_to_its_wal(tmp_path, umask_022):
    path = tmp_path / "store.sqlite3"
    path.touch()
    os.chmod(path, 0o640)
    os.chmod(tmp_path, 0o755)
    file = SqliteFile(path, "the test store", "CREATE TABLE IF NOT EXISTS t (x TEXT);")
    file.change("INSERT INTO t VALUES ('x')")
    try:
        assert mode(path) == mode(f"{path}-wal") == mode(f"{path}-shm") == 0o640
        assert mode(tmp_path) == 0o755
    finally:
        file.close()


def test_the_new_file_that_follows_a_damaged_one_is_private(tmp_path, umask_022):
    path = tmp_path / "store.sqlite3"
    file = SqliteFile(path, "the test store", "CREATE TABLE IF NOT EXISTS t (x TEXT);")
    file.change("INSERT INTO t VALUES ('x')")
    file.set_aside_damaged("is damaged (a test)")
    file.change("INSERT INTO t VALUES ('y')")
    try:
        assert mode(path) == mode(f"{path}-wal") == 0o600
    finally:
        file.close()


def test_the_trace_store_is_private_with_its_wal_and_shm(tmp_path, umask_022):
    from agents_trace.store import TraceStore

    path = tmp_path / "data" / "traces.sqlite3"
    store = TraceStore(path, max_age_s=3600.0, max_bytes=10**9)
    store.open()
    try:
        assert_private_database(path)
    finally:
        store.close()


def test_the_forecasts_directory_claimed_is_made_private(tmp_path, umask_022):
    from gateway.directory_claim import claim_directory

    claim = claim_directory(tmp_path / "data" / "predictor")
    try:
        assert mode(tmp_path / "data") == mode(tmp_path / "data" / "predictor") == 0o700
    finally:
        claim.release()
    (tmp_path / "operator").mkdir(mode=0o750)
    claim_directory(tmp_path / "operator").release()
    assert mode(tmp_path / "operator") == 0o750


def test_the_probed_costs_in_the_cache_directory_keep_the_umasks_mode(tmp_path, umask_022):
    """The cache directory is shared on purpose (docs/serving.md, Start-up): its probed
    costs are not made private with the tenants' data."""
    from tests.shards.test_probed_costs import COSTS, key
    from shards.probed_costs import ProbedCosts

    ProbedCosts(tmp_path / "costs.json").put(key(), COSTS, now_s=1000.0)
    assert mode(tmp_path / "costs.json") == 0o644


def test_the_new_file_that_follows_one_not_a_database_is_private(tmp_path, umask_022):
    from cache.sqlite_file import SqliteFile

    path = tmp_path / "store.sqlite3"
    path.write_text("not a database, " * 100)
    file = SqliteFile(path, "the test store", "CREATE TABLE IF NOT EXISTS t (x TEXT);")
    file.change("INSERT INTO t VALUES ('x')")
    try:
        assert mode(path) == mode(f"{path}-wal") == 0o600
    finally:
        file.close()


def test_the_claims_locks_are_private_so_no_other_user_can_remove_them(tmp_path):
    """A lock another local user could delete would let a second gateway sharing the files
    take a live gateway's running background responses for ended ones (`cancelled`)."""
    import asyncio

    from gateway.directory_claim import claim_directory
    from gateway.response_archive import ResponseArchive
    from gateway.response_store import ResponseStore, StoredResponse

    before = os.umask(0)
    try:
        claim = claim_directory(tmp_path / "predictor")
        store = ResponseStore(capacity=4, archive=ResponseArchive(tmp_path / "responses.sqlite3", 4))
        asyncio.run(store.put_and_wait("a", StoredResponse(
            {"id": "r1", "status": "queued", "background": True, "output": []}, ())))
        owners = tmp_path / "responses.sqlite3.owners"
        assert mode(tmp_path / "predictor" / ".writer.lock") == 0o600 and mode(owners) == 0o700
        assert {mode(lock) for lock in owners.iterdir()} == {0o600}
        store.close()
        claim.release()
    finally:
        os.umask(before)
