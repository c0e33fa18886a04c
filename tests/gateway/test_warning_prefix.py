"""Warnings an operator greps for start `stepahead: warning:` (QA175 #3): the partial uploads
a start removed, a trace store that could not be read, and a store's failed writes (a full
disk) lacked it, unlike the other warnings (the trace writer's line: test_writer.py)."""
import asyncio
import os
import sqlite3
import time
from types import SimpleNamespace

import pytest

from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.list_page import ListPage
from gateway.partial_files import PARTIAL_SUFFIX
from gateway.store_thread import StoreThread
from gateway.tracing import trace_store_unavailable

PREFIX = "stepahead: warning: "


def test_the_partial_uploads_a_start_removed_are_a_prefixed_warning(tmp_path, caplog):
    partial = tmp_path / f"file-0123456789abcdef01234567{PARTIAL_SUFFIX}"
    partial.write_bytes(b"cut short")
    then = time.time() - 600
    os.utime(partial, (then, then))
    with caplog.at_level("WARNING", logger="stepahead"):
        store = FileStore(tmp_path)
        asyncio.run(store.list("a", None, ListPage()))
        store.close()
    assert not partial.exists()
    assert caplog.messages == [f"{PREFIX}removed 1 partial file(s) of uploads cut short (the gateway was killed "
                               f"while writing them) from {tmp_path}"]


def test_a_trace_store_that_could_not_be_read_is_a_prefixed_warning(caplog):
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(gateway=SimpleNamespace(tracer=None))))
    with caplog.at_level("WARNING", logger="stepahead"):
        answer = trace_store_unavailable(request, sqlite3.OperationalError("disk I/O error"))
    assert answer.status == 503
    assert caplog.messages == [f"{PREFIX}reading the trace store failed: disk I/O error"]


def test_a_store_write_a_full_disk_failed_is_a_prefixed_line(caplog):
    def put():
        raise sqlite3.OperationalError("database or disk is full")

    thread = StoreThread("test-batches", "the batch store")
    with caplog.at_level("WARNING", logger="stepahead"):
        with pytest.raises(ApiError):
            asyncio.run(thread.call(put))
        thread.close()
    assert caplog.messages == [f"{PREFIX}the batch store failed to put: OperationalError: database or disk is full"]
