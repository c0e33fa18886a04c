"""A damaged file (or batch) index is set aside and a new one started (QA175 #2): the bytes
of the files it recorded are moved to `orphaned-<UTC time>/` beside it at once, with one
warning saying how many, their bytes and where, instead of staying in `files/` for good,
never listed, counted or removed. A file the new index records, one written after the
set-aside, an upload still partial, and a batch's results while a runner holds its claim
are left where they are."""
import asyncio
import fcntl
import io
import os
import sqlite3
import time
from pathlib import Path

from gateway.batch_store import Batch, BatchStore
from gateway.directory_claim import claim_lock_file
from gateway.file_store import FileStore
from gateway.list_page import ListPage
from gateway.partial_files import PARTIAL_SUFFIX
from gateway.unrecorded_files import ORPHANED_PREFIX

LONG_AGO_S = 600


def _aged(path: Path, seconds: float = LONG_AGO_S) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _upload(store: FileStore, name: str, data: bytes, tenant: str = "a") -> str:
    return asyncio.run(store.add(tenant, name, "user_data", io.BytesIO(data))).id


def _stopped_with_files(root: Path, num_files: int = 3) -> dict[str, bytes]:
    """Files uploaded by a gateway now stopped, written long ago: id -> bytes."""
    store = FileStore(root)
    kept = {}
    for n in range(num_files):
        data = os.urandom(1000 + n)
        kept[_upload(store, f"f{n}.bin", data, tenant="ab"[n % 2])] = data
    store.close()
    for file_id in kept:
        _aged(root / file_id)
    return kept


def _damage_a_page(index: Path) -> None:
    """Overwrite the index's last page (as QA175's repro): found when it is read."""
    sqlite3.connect(index).execute("PRAGMA wal_checkpoint(TRUNCATE)").connection.close()
    num_pages = index.stat().st_size // 4096
    with open(index, "r+b") as out:
        out.seek(4096 * (num_pages - 1))
        out.write(os.urandom(4096))


def _orphaned(root: Path) -> list[Path]:
    return sorted(root.glob(f"{ORPHANED_PREFIX}*"))


def _moved_lines(caplog) -> list[str]:
    return [m for m in caplog.messages if "had their records in the damaged index" in m]


def test_a_damaged_file_index_found_while_serving_moves_every_file_it_recorded_aside(tmp_path, caplog):
    kept = _stopped_with_files(tmp_path)
    _damage_a_page(tmp_path / "files.sqlite3")
    store = FileStore(tmp_path)
    with caplog.at_level("WARNING", logger="stepahead"):
        listed = [asyncio.run(store.list(tenant, None, ListPage()))[0] for tenant in "ab"]
    assert listed == [[], []]
    assert sorted(p.name for p in tmp_path.glob("file-*")) == []   # files/ holds only recorded files
    [aside] = _orphaned(tmp_path)
    [damaged] = tmp_path.glob("files.sqlite3.damaged-*[0-9]Z")
    assert aside.name == ORPHANED_PREFIX + damaged.name.split(".damaged-")[1]   # the set-aside's time
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == kept   # under their ids, whole
    assert _moved_lines(caplog) == [
        f"stepahead: warning: 3 file(s) ({sum(map(len, kept.values()))} bytes) in {tmp_path} had their records in "
        f"the damaged index {damaged}, not in the one started afresh; moved them to {aside} (to recover from "
        "there, or remove)"]
    new_id = _upload(store, "new.bin", b"new")   # the store goes on
    store.close()
    caplog.clear()
    again = FileStore(tmp_path)   # a later start moves nothing more, keeps the new file
    with caplog.at_level("WARNING", logger="stepahead"):
        assert [f.id for f in asyncio.run(again.list("a", None, ListPage()))[0]] == [new_id]
    again.close()
    assert [p.name for p in tmp_path.glob("file-*")] == [new_id] and _moved_lines(caplog) == []


def test_an_index_that_is_no_database_is_set_aside_at_start_with_the_files_it_recorded(tmp_path, caplog):
    kept = _stopped_with_files(tmp_path, num_files=2)
    for side in tmp_path.glob("files.sqlite3-*"):
        side.unlink()
    (tmp_path / "files.sqlite3").write_bytes(os.urandom(8192))   # not a database at all
    with caplog.at_level("WARNING", logger="stepahead"):
        store = FileStore(tmp_path)
        store.close()   # its start's calls run first: no request was needed
    [aside] = _orphaned(tmp_path)
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == kept
    assert list(tmp_path.glob("file-*")) == [] and len(_moved_lines(caplog)) == 1


def test_files_left_by_an_earlier_set_aside_are_moved_by_the_next_start(tmp_path, caplog):
    """An index set aside by a gateway killed before it moved the files (or by a version
    that did not): the next start moves those written before it, and only those."""
    kept = _stopped_with_files(tmp_path, num_files=2)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 60))
    os.replace(tmp_path / "files.sqlite3", tmp_path / f"files.sqlite3.damaged-{stamp}")
    for side in tmp_path.glob("files.sqlite3-*"):
        side.unlink()
    later = tmp_path / "file-0123456789abcdef01234567"   # written after the set-aside (another gateway's)
    later.write_bytes(b"later")
    partial = tmp_path / f"file-76543210fedcba9876543210{PARTIAL_SUFFIX}"   # an upload still being written
    partial.write_bytes(b"partial")
    _aged(partial)
    with open(partial, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)   # its writer holds it
        with caplog.at_level("WARNING", logger="stepahead"):
            store = FileStore(tmp_path)
            store.close()
    assert {p.name for p in (tmp_path / f"{ORPHANED_PREFIX}{stamp}").iterdir()} == set(kept)
    assert later.exists() and partial.exists()
    assert _moved_lines(caplog) == [
        f"stepahead: warning: 2 file(s) ({sum(map(len, kept.values()))} bytes) in {tmp_path} had their records in "
        f"the damaged index {tmp_path / f'files.sqlite3.damaged-{stamp}'}, not in the one started afresh; moved "
        f"them to {tmp_path / f'{ORPHANED_PREFIX}{stamp}'} (to recover from there, or remove)"]


def test_a_file_the_new_index_records_is_never_moved(tmp_path):
    store = FileStore(tmp_path)
    recorded = _upload(store, "kept.bin", b"kept")
    store.close()
    _aged(tmp_path / recorded)   # older than the set-aside, and recorded: stays
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 60))
    (tmp_path / f"files.sqlite3.damaged-{stamp}").write_bytes(b"an older index")
    again = FileStore(tmp_path)
    assert asyncio.run(again.read("a", recorded)) == b"kept"
    again.close()
    assert _orphaned(tmp_path) == []


def _batch(batch_id: str) -> Batch:
    return Batch(batch_id, "a", "/v1/chat/completions", "file-1", "24h", 1, 86401, status="in_progress")


def test_a_damaged_batch_index_moves_the_results_of_its_batches_aside_but_not_those_a_runner_holds(tmp_path,
                                                                                                   caplog):
    async def first_life():
        store = BatchStore(tmp_path)
        for batch_id in ("batch_free", "batch_held"):
            await store.put(_batch(batch_id))
            await store.append_results(batch_id, [{"custom_id": "r1"}])
        store.close()

    asyncio.run(first_life())
    results = tmp_path / "batch_results"
    for path in results.glob("*.jsonl"):
        _aged(path)
    for side in tmp_path.glob("batches.sqlite3-*"):
        side.unlink()
    (tmp_path / "batches.sqlite3").write_bytes(os.urandom(8192))   # not a database: set aside at start
    (tmp_path / "batch_claims").mkdir()
    held = claim_lock_file(tmp_path / "batch_claims" / "batch_held.lock")   # a runner (here or elsewhere) runs it
    assert held.held
    try:
        store = BatchStore(tmp_path)
        with caplog.at_level("WARNING", logger="stepahead"):
            assert asyncio.run(store.unfinished()) == []
        store.close()
    finally:
        held.release()
    [aside] = _orphaned(results)
    assert [p.name for p in aside.iterdir()] == ["batch_free.jsonl"]
    assert [p.name for p in results.glob("*.jsonl")] == ["batch_held.jsonl"]
    assert not (tmp_path / "batch_claims" / "batch_free.lock").exists()
    [line] = _moved_lines(caplog)
    assert line.startswith("stepahead: warning: 1 batch result file(s) (") and str(aside) in line
