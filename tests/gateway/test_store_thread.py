"""A store's own thread: results come back, an ApiError passes, a disk or database
failure is a 500 saying what failed and is logged once, a closed thread refuses."""
import asyncio
import sqlite3

import pytest

from gateway.errors import ApiError, invalid_request
from gateway.store_thread import StoreThread, TemporaryRoot


def _append_results():
    raise sqlite3.OperationalError("disk I/O error")


def test_calls_run_in_order_and_failures_become_500s_logged_once(caplog):
    thread = StoreThread("test-store", "the test store")
    seen = []

    async def main():
        assert await thread.call(lambda x: x * 2, 21) == 42
        with pytest.raises(ApiError) as refused:
            await thread.call(lambda: (_ for _ in ()).throw(invalid_request("no", param="p")))
        assert refused.value.status == 400   # an ApiError passes as raised
        with caplog.at_level("ERROR", logger="stepahead.gateway"):
            for _ in range(3):
                with pytest.raises(ApiError) as failed:
                    await thread.call(_append_results)
                assert failed.value.status == 500
            assert "could not append results: OperationalError: disk I/O error" in failed.value.message
            with pytest.raises(ApiError) as named:
                await thread.call(_append_results, named="add items")
            assert "could not add items" in named.value.message
            thread.submit(_append_results)   # not awaited: logged, not raised
            thread.submit(seen.append, "after")
        thread.close(lambda: seen.append("last"))
        with pytest.raises(ApiError) as closed:
            await thread.call(lambda: 1)
        assert closed.value.status == 500 and "stopping" in closed.value.message

    asyncio.run(main())
    assert seen == ["after", "last"]
    assert caplog.text.count("the test store failed to append results") == 1   # once a minute per operation


def test_a_temporary_root_is_made_on_first_use_and_removed():
    root = TemporaryRoot("test-root-")
    path = root.path
    assert path.is_dir() and root.path == path
    root.remove()
    assert not path.exists()


def test_a_file_stores_failed_byte_count_says_what_it_could_not_do(tmp_path, monkeypatch):
    """QA177: a full disk during an upload read 'The file store could not stored bytes'."""
    from gateway.file_store import FileStore

    store = FileStore(tmp_path / "files")

    def full_disk(tenant):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "_stored_bytes", full_disk)
    try:
        with pytest.raises(ApiError) as failed:
            asyncio.run(store.stored_bytes("alpha"))
        assert "The file store could not count its stored bytes: OperationalError" in failed.value.message
    finally:
        store.close()
