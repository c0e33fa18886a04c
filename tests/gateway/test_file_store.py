"""The Files API's store: bytes on disk, records per tenant, pages in the order made."""
import asyncio
import contextlib
import io
import itertools

import pytest

from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.list_page import ListPage


def _store(root=None) -> FileStore:
    ticks = itertools.count(100)
    return FileStore(root, clock=lambda: float(next(ticks)))


def test_files_are_kept_per_tenant_listed_by_creation_and_deleted_with_their_bytes(tmp_path):
    store = _store(tmp_path / "files")

    async def main():
        first = await store.add("a", "in.jsonl", "batch", io.BytesIO(b"line\n" * 3))
        second = await store.add_bytes("a", "out.jsonl", "batch_output", b"{}\n")
        await store.add_bytes("b", "theirs.txt", "user_data", b"secret")
        assert (first.bytes, first.filename, first.purpose) == (15, "in.jsonl", "batch")
        assert await store.read("a", first.id) == b"line\n" * 3 and store.path_of(first).exists()
        newest, more = await store.list("a", None, ListPage(limit=1))
        assert [f.id for f in newest] == [second.id] and more
        rest, more = await store.list("a", None, ListPage(limit=5, after=second.id))
        assert [f.id for f in rest] == [first.id] and not more
        assert [f.id for f in (await store.list("a", "batch", ListPage(order="asc")))[0]] == [first.id]
        for call in (store.get("b", first.id), store.read("b", first.id), store.delete("b", first.id)):
            with pytest.raises(ApiError) as missing:
                await call
            assert missing.value.status == 404
        await store.delete("a", first.id)
        assert not store.path_of(first).exists()
        with pytest.raises(ApiError):
            await store.get("a", first.id)

    asyncio.run(main())
    store.close()
    assert (tmp_path / "files" / "files.sqlite3").exists()   # kept: files outlive a restart


def test_without_a_directory_files_live_in_a_temporary_one_removed_at_close():
    store = _store()
    stored = asyncio.run(store.add_bytes("a", "x.txt", "user_data", b"x"))
    root = store.root
    assert (root / stored.id).read_bytes() == b"x"
    store.close()
    assert not root.exists()


def test_a_copy_past_its_limit_is_a_413_and_leaves_nothing():
    from gateway.errors import ApiError

    store = _store()

    async def main():
        with pytest.raises(ApiError) as too_large:
            await store.add("a", "big.bin", "user_data", io.BytesIO(b"x" * (3 << 20)), max_bytes=2 << 20)
        assert too_large.value.status == 413
        assert list(store.root.iterdir()) == [] and (await store.list("a", None, ListPage()))[0] == []
        assert (await store.add("a", "ok.bin", "user_data", io.BytesIO(b"x" * 10), max_bytes=10)).bytes == 10

    asyncio.run(main())
    store.close()


def test_a_file_past_its_expiry_is_gone_and_the_next_upload_removes_its_bytes(tmp_path):
    now = [1000.0]
    store = FileStore(tmp_path / "files", clock=lambda: now[0])

    async def main():
        brief = await store.add_bytes("a", "brief.txt", "user_data", b"soon gone", expires_after_s=3600)
        kept = await store.add_bytes("a", "kept.txt", "user_data", b"stays")
        assert (brief.expires_at, kept.expires_at) == (4600, None)
        assert brief.as_object()["expires_at"] == 4600
        now[0] = 4599.0
        assert (await store.get("a", brief.id)).expires_at == 4600
        now[0] = 4600.0
        for call in (store.get("a", brief.id), store.read("a", brief.id)):
            with pytest.raises(ApiError) as gone:
                await call
            assert gone.value.status == 404
        assert store.path_of(brief).exists()   # until the next upload or listing
        listed, _ = await store.list("a", None, ListPage())
        assert [f.id for f in listed] == [kept.id] and not store.path_of(brief).exists()
        assert await store.read("a", kept.id) == b"stays"

    asyncio.run(main())
    store.close()


def test_a_file_index_of_the_first_version_gets_the_expiry_column_and_keeps_its_files(tmp_path):
    import sqlite3
    root = tmp_path / "files"
    root.mkdir()
    db = sqlite3.connect(root / "files.sqlite3")
    db.executescript("""CREATE TABLE files (tenant TEXT NOT NULL, id TEXT NOT NULL, bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL, PRIMARY KEY (tenant, id));""")
    db.execute("INSERT INTO files VALUES ('a', 'file-old', 3, 5, 'old.txt', 'user_data')")
    db.commit()
    db.close()
    (root / "file-old").write_bytes(b"old")
    store = _store(root)

    async def main():
        old = await store.get("a", "file-old")
        assert (old.filename, old.expires_at) == ("old.txt", None)
        assert await store.read("a", "file-old") == b"old"
        assert (await store.add_bytes("a", "new.txt", "user_data", b"n", expires_after_s=3600)).expires_at > 3600

    asyncio.run(main())
    store.close()
    assert _expiry_sweep_plan(root) == "SEARCH files USING INDEX files_by_expiry (expires_at<?)"


def _expiry_sweep_plan(root) -> str:
    """How SQLite reads the expired-files sweep each upload and list run (FileStore._remove_expired)."""
    import sqlite3
    with contextlib.closing(sqlite3.connect(root / "files.sqlite3")) as db:
        return db.execute("EXPLAIN QUERY PLAN SELECT tenant, id FROM files WHERE expires_at <= ? LIMIT 256",
                          (0,)).fetchall()[0][3]


def test_the_expired_files_sweep_reads_an_index_not_every_tenants_files(tmp_path):
    store = _store(tmp_path / "files")
    asyncio.run(store.add_bytes("a", "a.txt", "user_data", b"a"))
    store.close()
    assert _expiry_sweep_plan(tmp_path / "files") == "SEARCH files USING INDEX files_by_expiry (expires_at<?)"


def test_files_made_in_one_second_list_in_the_order_made_and_pages_agree():
    """Known answer: six files at the same created_at list newest first exactly (random ids
    cannot order them), oldest first with `order=asc`, and pages of two walk the same list."""
    store = FileStore(None, clock=lambda: 1000.0)

    async def main():
        made = [(await store.add_bytes("a", f"f{n}.txt", "user_data", b"x")).id for n in range(6)]
        await store.add_bytes("b", "theirs.txt", "user_data", b"x")
        newest = [f.id for f in (await store.list("a", None, ListPage(limit=100)))[0]]
        oldest = [f.id for f in (await store.list("a", None, ListPage(limit=100, order="asc")))[0]]
        pages = {}
        for order in ("desc", "asc"):
            walked, after = [], None
            while True:
                page, more = await store.list("a", None, ListPage(limit=2, order=order, after=after))
                walked += [f.id for f in page]
                if not more:
                    break
                after = page[-1].id
            pages[order] = walked
        await store.delete("a", made[-1])
        later = (await store.add_bytes("a", "later.txt", "user_data", b"x")).id
        [first], _ = await store.list("a", None, ListPage(limit=1))
        return made, newest, oldest, pages, later, first.id

    made, newest, oldest, pages, later, first = asyncio.run(main())
    store.close()
    assert newest == pages["desc"] == made[::-1] and oldest == pages["asc"] == made
    assert first == later   # made after the newest was deleted: still listed first


def test_a_file_index_without_numbers_numbers_its_files_in_the_order_they_were_made(tmp_path):
    import sqlite3
    root = tmp_path / "files"
    root.mkdir()
    db = sqlite3.connect(root / "files.sqlite3")
    db.executescript("""CREATE TABLE files (tenant TEXT NOT NULL, id TEXT NOT NULL, bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL, expires_at INTEGER,
        PRIMARY KEY (tenant, id));""")
    for file_id in ("file-c", "file-a", "file-b"):   # made in this order, in one second
        db.execute("INSERT INTO files VALUES ('a', ?, 1, 5, 'x.txt', 'user_data', NULL)", (file_id,))
    db.commit()
    db.close()
    store = FileStore(root, clock=lambda: 5.0)

    async def main():
        new = await store.add_bytes("a", "new.txt", "user_data", b"n")
        return new.id, [f.id for f in (await store.list("a", None, ListPage()))[0]]

    new_id, listed = asyncio.run(main())
    store.close()
    assert listed == [new_id, "file-b", "file-a", "file-c"]
