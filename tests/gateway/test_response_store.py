"""The Responses API's store: bounded per tenant, least recently used out first, and
kept on disk across restarts when it has an archive."""
import asyncio
import itertools
import os
import signal
import sqlite3
import subprocess
import sys

from gateway.response_archive import ResponseArchive
from gateway.response_store import KILLED, OWNER_FIELD, ResponseStore, StoredResponse, stopped_error

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a gateway process that stored a queued and an in-progress background response, still running them
OWNER = """
import asyncio, sys, time
from pathlib import Path
from gateway.response_archive import ResponseArchive
from gateway.response_store import ResponseStore, StoredResponse
store = ResponseStore(capacity=8, archive=ResponseArchive(Path(sys.argv[1]), 8))
for status in ("queued", "in_progress"):
    response = {"id": f"r_{status}", "status": status, "background": True, "output": [], "error": None}
    asyncio.run(store.put_and_wait("a", StoredResponse(response, (), ({"type": "message", "id": status},))))
print("stored", flush=True)
time.sleep(60)
"""


def _stored(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "output": [{"text": f"ü {response_id}"}]},
                          ({"role": "user", "content": response_id},))


def _get(store: ResponseStore, tenant: str, response_id: str):
    return asyncio.run(store.get(tenant, response_id))


def _delete(store: ResponseStore, tenant: str, response_id: str) -> bool:
    return asyncio.run(store.delete(tenant, response_id))


def test_store_is_per_tenant_and_evicts_the_least_recently_used():
    store = ResponseStore(capacity=2)
    store.put("a", _stored("r1"))
    store.put("a", _stored("r2"))
    assert _get(store, "b", "r1") is None  # another tenant never sees it
    assert _get(store, "a", "r1").messages[0]["content"] == "r1"  # r1 is now the most recent
    store.put("a", _stored("r3"))
    assert len(store) == 2 and _get(store, "a", "r2") is None  # r2 was the least recently used
    assert _get(store, "a", "r1") is not None and _get(store, "a", "r3") is not None


def test_one_tenants_traffic_never_evicts_anothers_responses():
    store = ResponseStore(capacity=2)
    store.put("quiet", _stored("q1"))
    for index in range(10):
        store.put("noisy", _stored(f"n{index}"))
    assert _get(store, "quiet", "q1") is not None
    assert [_get(store, "noisy", f"n{i}") is not None for i in range(10)] == [False] * 8 + [True] * 2
    assert len(store) == 3


def test_delete_forgets_only_the_owners_response():
    store = ResponseStore()
    store.put("a", _stored("r1"))
    assert not _delete(store, "b", "r1") and _get(store, "a", "r1") is not None
    assert _delete(store, "a", "r1") and _get(store, "a", "r1") is None and not _delete(store, "a", "r1")


def test_archived_responses_survive_a_restart_per_tenant_and_bounded(tmp_path):
    path = tmp_path / "responses.sqlite3"
    first = ResponseStore(capacity=2, archive=ResponseArchive(path, 2))
    for name in ("r1", "r2", "r3"):
        first.put("a", _stored(name))
    first.put("b", _stored("b1"))
    assert _delete(first, "a", "r3")
    first.close()  # waits for the writes

    second = ResponseStore(capacity=2, archive=ResponseArchive(path, 2))
    assert len(second) == 0  # nothing in memory: what follows comes from disk
    assert _get(second, "a", "r2") == _stored("r2")  # the same object, unicode intact
    assert _get(second, "a", "r1") is None  # the oldest of three, beyond the capacity of 2
    assert _get(second, "a", "r3") is None  # deleted
    assert _get(second, "b", "r2") is None and _get(second, "b", "b1") is not None
    second.close()


def test_a_response_evicted_from_memory_is_read_back_from_disk(tmp_path):
    store = ResponseStore(capacity=1, archive=ResponseArchive(tmp_path / "r.sqlite3", 5))
    store.put("a", _stored("r1"))
    store.put("a", _stored("r2"))  # r1 leaves memory, not the archive
    assert len(store) == 1 and _get(store, "a", "r1") == _stored("r1")
    store.close()


def test_a_read_from_memory_orders_the_archive_as_memory(tmp_path):
    """r1 is read (from memory) after r2 was stored, so r2 is the one to leave, on disk too:
    after a restart r1 is still there (the archive used to trim by storing order)."""
    path = tmp_path / "r.sqlite3"
    ticks = itertools.count()
    store = ResponseStore(capacity=2, archive=ResponseArchive(path, 2, clock=lambda: next(ticks)))
    store.put("a", _stored("r1"))
    store.put("a", _stored("r2"))
    assert _get(store, "a", "r1") is not None
    store.put("a", _stored("r3"))
    assert _get(store, "a", "r2") is None   # from memory and the archive
    store.close()
    again = ResponseStore(capacity=2, archive=ResponseArchive(path, 2))
    assert [_get(again, "a", name) is not None for name in ("r1", "r2", "r3")] == [True, False, True]
    again.close()


def test_a_broken_archive_degrades_to_memory(tmp_path, caplog):
    bad = tmp_path / "a directory, not a file"
    bad.mkdir()
    store = ResponseStore(capacity=4, archive=ResponseArchive(bad, 4))
    store.put("a", _stored("r1"))  # the disk write fails and is logged
    assert _get(store, "a", "r1") == _stored("r1")  # memory still answers
    assert _get(store, "a", "other") is None
    store.close()
    assert "response archive failed" in caplog.text


def test_an_archive_file_that_is_not_a_database_is_set_aside_and_a_new_one_kept(tmp_path):
    path = tmp_path / "responses.sqlite3"
    path.write_bytes(b"this is not a sqlite file" * 100)
    store = ResponseStore(capacity=4, archive=ResponseArchive(path, 4))
    store.put("a", _stored("r1"))
    store.close()
    reopened = ResponseStore(capacity=4, archive=ResponseArchive(path, 4))
    assert _get(reopened, "a", "r1") == _stored("r1")   # from the new file, after a restart
    reopened.close()
    [aside] = tmp_path.glob("responses.sqlite3.damaged-*")
    assert aside.read_bytes() == b"this is not a sqlite file" * 100


def test_an_archive_found_damaged_is_set_aside_and_what_is_stored_next_is_kept(tmp_path, caplog):
    from tests.cache.test_damaged_files import damage_pages

    path = tmp_path / "responses.sqlite3"
    archive = ResponseArchive(path, 64)
    for n in range(40):   # rows past the first page
        archive.put("a", _stored(f"old{n}"))
    archive.close()
    damage_pages(path, table="responses")
    damaged_bytes = path.read_bytes()
    archive = ResponseArchive(path, 64)
    with caplog.at_level("WARNING", logger="stepahead"):
        assert archive.get("a", "old1") is None   # found damaged: set aside, not in the new one
        archive.put("a", _stored("new"))
    assert archive.get("a", "new") == _stored("new")
    archive.close()
    [aside] = tmp_path.glob("responses.sqlite3.damaged-*[0-9]Z")
    assert aside.read_bytes() == damaged_bytes
    assert "the response archive" in caplog.text and "is damaged (database disk image is malformed)" in caplog.text
    assert "Traceback" not in caplog.text


def test_archive_rows_are_json(tmp_path):
    path = tmp_path / "r.sqlite3"
    archive = ResponseArchive(path, 3)
    archive.put("a", _stored("r1"))
    archive.close()
    row = sqlite3.connect(path).execute("SELECT tenant, id, response FROM responses").fetchone()
    assert row[:2] == ("a", "r1") and '"ü r1"' in row[2]


def test_the_archive_keeps_what_a_reference_lru_keeps_per_tenant(tmp_path):
    """Random puts, reads, replacements and deletes over three tenants: after every
    operation each tenant's archive holds exactly the `capacity` most recently used ids
    that a plain ordered-dict LRU holds."""
    import itertools
    import random
    from collections import OrderedDict

    ticks = itertools.count()
    archive = ResponseArchive(tmp_path / "r.sqlite3", 5, clock=lambda: float(next(ticks)))
    reference = {tenant: OrderedDict() for tenant in "abc"}
    rng = random.Random(7)
    for _ in range(400):
        tenant, response_id = rng.choice("abc"), f"r{rng.randrange(12)}"
        kept = reference[tenant]
        action = rng.random()
        if action < 0.5:
            archive.put(tenant, _stored(response_id))
            kept[response_id] = None
            kept.move_to_end(response_id)
            while len(kept) > 5:
                kept.popitem(last=False)
        elif action < 0.85:
            assert (archive.get(tenant, response_id) is not None) == (response_id in kept)
            if response_id in kept:
                kept.move_to_end(response_id)
        else:
            assert archive.delete(tenant, response_id) == (response_id in kept)
            kept.pop(response_id, None)
        rows = archive.db.execute("SELECT tenant, id FROM responses ORDER BY used_s").fetchall()
        assert {t: [i for row_tenant, i in rows if row_tenant == t] for t in "abc"} == \
            {t: list(ids) for t, ids in reference.items()}
    archive.close()


def test_an_archive_failing_every_put_is_logged_once_and_memory_still_serves(tmp_path, caplog):
    blocker = tmp_path / "a file, not a directory"
    blocker.write_text("")
    store = ResponseStore(capacity=64, archive=ResponseArchive(blocker / "responses.sqlite3", 64))
    with caplog.at_level("ERROR", logger="stepahead.gateway"):
        for n in range(20):
            store.put("a", _stored(f"r{n}"))
        store.close()   # waits for the archive thread's puts
    assert [record.getMessage() for record in caplog.records] == [   # one line: the directory it would make is a file
        f"stepahead: warning: the response archive failed to put: FileExistsError: [Errno 17] File exists: '{blocker}'"]
    assert store.num_archive_failures == 20   # each counted (in /metrics for admins)
    assert _get(store, "a", "r19") == _stored("r19")


def _unfinished(response_id: str, status: str = "queued") -> StoredResponse:
    return StoredResponse({"id": response_id, "status": status, "background": True, "output": [], "error": None},
                          (), ({"type": "message", "id": response_id},))


def test_a_killed_gateways_unfinished_background_responses_read_back_failed_not_while_it_lives(tmp_path):
    """The owner stored them before it handed their ids out; while it runs, another
    gateway on the same file reads them as they stand; once it is killed (no graceful
    stop stored them `failed`), they read back `failed` with an error saying the gateway
    stopped (FI85: not `cancelled`, a client's cancel), not a 404."""
    path = tmp_path / "responses.sqlite3"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    reader = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    try:
        assert owner.stdout.readline().strip() == "stored"
        for status in ("queued", "in_progress"):
            stored = _get(reader, "a", f"r_{status}")
            assert stored.response["status"] == status and OWNER_FIELD not in stored.response
        assert len(reader) == 0   # not kept in memory: the next read sees the owner's later writes
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        owner.stdout.close()
    for status in ("queued", "in_progress"):
        stored = _get(reader, "a", f"r_{status}")
        assert stored.response == {"id": f"r_{status}", "status": "failed", "background": True, "output": [],
                                   "error": stopped_error(KILLED)}
        assert stored.input_items == ({"type": "message", "id": status},) and stored.messages == ()
    assert _get(reader, "b", "r_queued") is None   # still per tenant
    reader.close()
    archive = ResponseArchive(path, 8)   # stored ended, as a graceful stop stores them
    assert archive.get("a", "r_queued").response["status"] == "failed"
    archive.close()
    assert list((tmp_path / "responses.sqlite3.owners").iterdir()) == []   # the dead owner's lock file went


def test_a_store_never_ends_the_runs_it_owns_and_gives_them_up_when_closed(tmp_path):
    """Two stores on one file in one process (two gateways): neither ends the other's
    unfinished rows, nor its own; once one is closed without ending its runs (as after a
    crash), the other reads them `failed`."""
    path = tmp_path / "responses.sqlite3"
    first = ResponseStore(capacity=1, archive=ResponseArchive(path, 8))
    asyncio.run(first.put_and_wait("a", _unfinished("r1")))
    first.put("a", _stored("other"))   # r1 leaves memory (capacity 1): read back from the archive
    assert _get(first, "a", "r1") == _unfinished("r1")
    second = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    assert _get(second, "a", "r1") == _unfinished("r1")
    first.close()
    assert _get(second, "a", "r1").response["status"] == "failed"
    second.close()


def test_only_a_background_response_still_running_is_archived_with_its_owner(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    store.put("a", _unfinished("r1"))
    store.put("a", StoredResponse({"id": "r2", "status": "queued", "background": False}, ()))
    store.put("a", StoredResponse({"id": "r3", "status": "completed", "background": True}, ()))
    store.close()
    rows = dict(sqlite3.connect(path).execute("SELECT id, response FROM responses").fetchall())
    assert [OWNER_FIELD in rows[name] for name in ("r1", "r2", "r3")] == [True, False, False]
    assert not (tmp_path / "responses.sqlite3.owners" / f"{store.owner}.lock").exists()   # given up at close


def test_a_response_deleted_through_another_gateway_is_not_served_from_memory(tmp_path):
    path = tmp_path / "responses.sqlite3"
    first = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    second = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    first.put("a", _stored("r1"))
    first.put("a", _stored("r2"))
    assert _get(first, "a", "r1") == _stored("r1") and _get(second, "a", "r1") == _stored("r1")
    assert _delete(second, "a", "r1") is True
    assert _get(first, "a", "r1") is None and _get(second, "a", "r1") is None
    assert len(first) == 1 and _get(first, "a", "r2") == _stored("r2")   # the other response still served
    asyncio.run(second.put_and_wait("a", _stored("r3")))   # in the file before the other gateway looks
    assert _get(first, "a", "r3") == _stored("r3") and _delete(second, "a", "r3") is True
    assert _delete(first, "a", "r3") is False   # deleted already: its copy in memory is no response
    first.close()
    second.close()


def test_a_background_run_deleted_through_another_gateway_is_not_stored_again_when_it_ends(tmp_path):
    path = tmp_path / "responses.sqlite3"
    owner = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    other = ResponseStore(capacity=8, archive=ResponseArchive(path, 8))
    asyncio.run(owner.put_and_wait("a", _unfinished("r1")))
    assert _delete(other, "a", "r1") is True   # while the owner runs it
    owner.put("a", _unfinished("r1", "in_progress"))
    owner.put("a", StoredResponse({"id": "r1", "status": "completed", "background": True, "output": []}, ()))
    assert _get(owner, "a", "r1") is None and _get(other, "a", "r1") is None
    asyncio.run(owner.put_and_wait("a", _unfinished("r2")))   # not deleted: each state replaces the last
    owner.put("a", StoredResponse({"id": "r2", "status": "completed", "background": True, "output": []}, ()))
    owner.put("a", _stored("r3"))   # after its end, a response id stored again is a plain put
    owner.close()
    assert _get(other, "a", "r2").response["status"] == "completed"
    other.close()
    rows = dict(sqlite3.connect(path).execute("SELECT id, response FROM responses").fetchall())
    assert sorted(rows) == ["r2", "r3"] and OWNER_FIELD not in rows["r2"]


def test_marking_a_response_read_from_memory_waits_briefly_for_a_locked_file(tmp_path):
    """QA143 M1: a GET of a response this gateway holds in memory marked its archive row
    used with SQLite's whole 5 s busy timeout while another gateway held the file locked;
    now it waits as a read's mark does (and still says whether the row is there)."""
    import sqlite3
    import time

    from gateway.response_archive import ResponseArchive

    path = tmp_path / "responses.sqlite3"
    archive = ResponseArchive(path, 8)
    archive.put("a", _stored("resp_1"))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")   # another gateway's write lock
    try:
        started_s = time.monotonic()
        present, missing = archive.touch("a", "resp_1"), archive.touch("a", "resp_none")
        waited_s = time.monotonic() - started_s
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (present, missing) == (True, False)
    assert waited_s < 2.0   # was 5 s (the first touch)
    archive.close()
