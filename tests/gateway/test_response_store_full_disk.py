"""The response store on a full disk: a response whose put failed is served from memory
(never taken for one deleted through another gateway), written to the archive once the
disk has room, so it survives a restart, and a delete still removes it."""
import asyncio
import sqlite3

from gateway.response_archive import ResponseArchive
from gateway.response_store import ResponseStore, StoredResponse


class FullDisk:
    """A connection whose writes fail as SQLite's do on a full disk. With `updates_pass`,
    an UPDATE still runs: one that matches no row succeeds on a full disk (the touch of a
    row never written)."""

    def __init__(self, db: sqlite3.Connection, updates_pass: bool = True) -> None:
        self._db = db
        self._writes = ("INSERT", "DELETE", "BEGIN", "REPLACE") + (() if updates_pass else ("UPDATE",))

    def execute(self, sql: str, args=()):
        if sql.lstrip().split(None, 1)[0].upper() in self._writes:
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def _stored(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "output": [{"text": response_id}]}, ({"role": "user", "content": "hi"},))


def _on_archive_thread(store: ResponseStore, call) -> None:
    store._archivist.submit(call).result()


def _fill(store: ResponseStore, updates_pass: bool = True) -> sqlite3.Connection:
    """The disk of the store's archive fills up; returns the real connection."""
    real = []
    def fill():
        real.append(store.archive.db)
        store.archive.file._db = FullDisk(real[0], updates_pass)
    _on_archive_thread(store, fill)
    return real[0]


def _free(store: ResponseStore, real: sqlite3.Connection) -> None:
    def free():
        store.archive.file._db = real
    _on_archive_thread(store, free)


def _store(path, capacity: int = 8) -> ResponseStore:
    return ResponseStore(capacity=capacity, archive=ResponseArchive(path, capacity))


def _full_after_one(path, *held: str) -> tuple[ResponseStore, sqlite3.Connection]:
    """A store that archived response "before", then whose disk filled, then that was put
    `held` (kept in memory only); and the archive's real connection."""
    store = _store(path)
    store.put("a", _stored("before"))
    real = _fill(store)
    for response_id in held:
        store.put("a", _stored(response_id))
    return store, real


def _get(store: ResponseStore, response_id: str, tenant: str = "a"):
    return asyncio.run(store.get(tenant, response_id))


def test_a_response_put_while_the_disk_is_full_is_served_from_memory(tmp_path):
    for updates_pass in (True, False):   # the touch finds no row, or fails itself
        store = _store(tmp_path / f"responses-{updates_pass}.sqlite3")
        store.put("a", _stored("before"))
        _fill(store, updates_pass)
        store.put("a", _stored("r1"))
        for _ in range(3):
            assert _get(store, "r1") == _stored("r1")
        assert _get(store, "r1", tenant="b") is None
        assert _get(store, "before") == _stored("before")
        store.close()


def test_once_the_disk_has_room_the_held_response_is_archived_and_survives_a_restart(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store, real = _full_after_one(path, "r1", "r2")
    assert _get(store, "r1") == _stored("r1")
    _free(store, real)
    store.put("a", _stored("r3"))   # succeeds: the held ones follow it
    _on_archive_thread(store, lambda: None)
    assert {row[0] for row in real.execute("SELECT id FROM responses")} == {"before", "r1", "r2", "r3"}
    store.close()
    restarted = _store(path)
    assert [_get(restarted, f"r{n}") for n in (1, 2, 3)] == [_stored(f"r{n}") for n in (1, 2, 3)]
    restarted.close()


def test_a_read_or_the_close_writes_the_held_response_once_there_is_room(tmp_path):
    for how in ("read", "close"):
        path = tmp_path / f"responses-{how}.sqlite3"
        store, real = _full_after_one(path, "r1")
        _free(store, real)
        if how == "read":
            assert _get(store, "r1") == _stored("r1")
            _on_archive_thread(store, lambda: None)
            assert real.execute("SELECT count(*) FROM responses WHERE id = 'r1'").fetchone() == (1,)
        store.close()
        restarted = _store(path)
        assert _get(restarted, "r1") == _stored("r1"), how
        restarted.close()


def test_a_held_response_deleted_is_gone_and_never_written(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store, real = _full_after_one(path, "r1")
    assert asyncio.run(store.delete("a", "r1")) is True
    assert _get(store, "r1") is None
    assert asyncio.run(store.delete("a", "r1")) is False
    _free(store, real)
    store.close()
    restarted = _store(path)
    assert _get(restarted, "r1") is None and _get(restarted, "before") == _stored("before")
    restarted.close()


def test_the_held_responses_keep_their_place_in_the_archives_order_of_use(tmp_path):
    """Written later with the time each was last used, they leave the archive when they
    would have, not a response memory used after them."""
    ticks = iter(range(1000))
    store = ResponseStore(capacity=2, archive=ResponseArchive(tmp_path / "r.sqlite3", 2, clock=lambda: next(ticks)))
    store.put("a", _stored("x"))
    real = _fill(store)
    store.put("a", _stored("held"))
    assert _get(store, "x") == _stored("x")   # memory and the archive: x used after held
    _free(store, real)
    store.put("a", _stored("new"))   # memory: x, new (held leaves); the archive the same
    assert _get(store, "x") == _stored("x") and _get(store, "new") == _stored("new")
    assert _get(store, "held") is None
    assert {row[0] for row in real.execute("SELECT id FROM responses")} == {"x", "new"}
    store.close()


def test_a_background_response_whose_first_put_failed_keeps_its_later_states(tmp_path):
    path = tmp_path / "responses.sqlite3"
    store, real = _full_after_one(path)
    queued = StoredResponse({"id": "bg", "status": "queued", "background": True, "output": [], "error": None}, ())
    asyncio.run(store.put_and_wait("a", queued))
    _free(store, real)
    completed = StoredResponse({**queued.response, "status": "completed"}, ())
    asyncio.run(store.put_and_wait("a", completed))   # replaces the row: there is none, it was never written
    store.close()
    restarted = _store(path)
    assert _get(restarted, "bg") == completed
    restarted.close()


def test_an_archived_response_read_back_while_the_disk_is_full_is_answered(tmp_path):
    """Its last-used time cannot be written; the read answers all the same."""
    path = tmp_path / "responses.sqlite3"
    store = _store(path)
    store.put("a", _stored("r1"))
    store.close()
    store = _store(path)   # a restart: memory is empty
    _fill(store, updates_pass=False)
    assert _get(store, "r1") == _stored("r1")
    store.close()
