"""A background response that has not ended is never pushed out of the response store
(memory, or the archive's trim) by the tenant's `responses_per_tenant`: the finished
ones leave in its stead, and its final object is stored when it ends (QA78 finding 1)."""
import asyncio
import json
import sqlite3

from gateway.response_archive import ResponseArchive
from gateway.response_store import OWNER_FIELD, ResponseStore, StoredResponse


def _finished(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "status": "completed", "background": False, "output": []},
                          ({"role": "user", "content": response_id},))


def _background(response_id: str, status: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "status": status, "background": True, "output": []}, ())


def _get(store: ResponseStore, tenant: str, response_id: str):
    return asyncio.run(store.get(tenant, response_id))


def _fill_around_a_running_response(store: ResponseStore) -> None:
    """A background response stored queued, then in progress, then three finished ones
    from the same tenant (capacity 3)."""
    asyncio.run(store.put_and_wait("a", _background("bg", "queued")))
    store.put("a", _background("bg", "in_progress"))
    for name in ("r1", "r2", "r3"):
        store.put("a", _finished(name))


def test_a_running_background_response_stays_in_memory_and_the_finished_ones_leave():
    store = ResponseStore(capacity=3)
    _fill_around_a_running_response(store)
    assert _get(store, "a", "bg").response["status"] == "in_progress"
    assert store.num_unfinished("a") == 1 and store.num_unfinished("b") == 0
    assert [_get(store, "a", name) is not None for name in ("r1", "r2", "r3")] == [False, True, True]
    store.put("a", _background("bg", "completed"))   # its end
    assert store.num_unfinished("a") == 0 and _get(store, "a", "bg").response["status"] == "completed"
    store.put("a", _finished("r4"))   # once ended, it is an ordinary response: r2 is now the oldest
    assert [_get(store, "a", name) is not None for name in ("bg", "r2", "r3", "r4")] == [True, False, True, True]


def test_a_running_background_response_is_not_trimmed_from_the_archive_and_its_end_is_stored(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store = ResponseStore(capacity=3, archive=ResponseArchive(path, 3))
    _fill_around_a_running_response(store)
    assert _get(store, "a", "bg").response["status"] == "in_progress"   # from memory, its row still there
    store.put("a", _background("bg", "completed"))
    store.close()
    again = ResponseStore(capacity=3, archive=ResponseArchive(path, 3))
    try:
        ended = _get(again, "a", "bg")   # after a restart: from the archive
        assert ended is not None and ended.response["status"] == "completed"
        assert [_get(again, "a", name) is not None for name in ("r1", "r2", "r3")] == [False, True, True]
    finally:
        again.close()


def test_the_archive_trims_finished_rows_only_and_a_row_of_damaged_json_is_trimmed_as_finished(tmp_path):
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 2, clock=iter(range(100)).__next__)
    try:
        running = {"id": "bg", "status": "in_progress", "background": True, OWNER_FIELD: "1-0123456789abcdef"}
        archive.put("a", StoredResponse(running, ()))
        archive.db.execute("INSERT INTO responses (tenant, id, used_s, response, messages, input_items) "
                           "VALUES ('a', 'bad', 1.5, 'not json', '[]', '[]')")
        for name in ("r1", "r2", "r3"):
            archive.put("a", _finished(name))
        ids = {row[0] for row in archive.db.execute("SELECT id FROM responses WHERE tenant = 'a'")}
        assert ids == {"bg", "r3"}   # two rows: the running one, and the newest finished
        assert json.loads(archive.db.execute("SELECT response FROM responses WHERE id = 'bg'").fetchone()[0]) \
            == running
    finally:
        archive.close()
    assert sqlite3.connect(tmp_path / "responses.sqlite3").execute("SELECT count(*) FROM responses").fetchone() \
        == (2,)


def test_unfinished_rows_that_alone_fill_a_tenants_place_keep_it_beside_a_response_just_stored(tmp_path):
    # QA83: runs of other gateways sharing the file (or of a killed one) are not counted by this
    # gateway's 429: with unfinished rows filling the tenant's place, each finished response was
    # deleted as it was stored (a 404 right after it was answered); QA89: nor may a run's row go
    archive = ResponseArchive(tmp_path / "responses.sqlite3", 3)
    try:
        for number in range(4):   # more unfinished runs than the capacity, from "other gateways"
            running = _background(f"bg{number}", "in_progress")
            archive.put("a", StoredResponse({**running.response, OWNER_FIELD: "1-00000000000000aa"}, ()))
        assert archive.put("a", _finished("done"))
        assert archive.get("a", "done") is not None   # the response just stored is found
        assert all(archive.get("a", f"bg{number}") is not None for number in range(4))   # no run lost
        assert archive.put("a", _finished("done2")) and archive.get("a", "done2") is not None
        assert archive.get("a", "done") is None   # finished ones leave, oldest first
    finally:
        archive.close()
