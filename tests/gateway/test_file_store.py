"""The Files API's store: bytes on disk, records per tenant, pages by creation."""
import asyncio
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
