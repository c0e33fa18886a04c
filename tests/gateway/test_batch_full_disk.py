"""A batch running while the disk is full (QA41 #3): the first result that cannot be kept
stops the sending (no request runs whose result could not be kept), one line is logged
(not one traceback per request), every request task's failure is retrieved, and the
batch goes on by itself once the disk has room again, within the adoption period, with
the requests without a result: it completes with each request's result once."""
import asyncio
import errno
import gc
import json
import logging
import sqlite3

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import gateway.batch_adoption
from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore

NUM_LINES = 12
CONCURRENCY = 3
KEPT_BEFORE_FULL = 4   # results appended before the disk fills


class FillingStore(BatchStore):
    """A batch store whose disk fills after `KEPT_BEFORE_FULL` results: then `failing`
    (appending results, or saving a batch's record) raises, until `full` is cleared."""

    def __init__(self, root, failing: str) -> None:
        super().__init__(root)
        self.failing, self.full, self.num_appended = failing, False, 0

    def _append_results(self, batch_id: str, results: list[dict]) -> list[dict]:
        if self.full and self.failing == "append":
            raise OSError(errno.ENOSPC, "No space left on device")
        kept = super()._append_results(batch_id, results)
        self.num_appended += len(results)
        self.full = self.full or self.num_appended == KEPT_BEFORE_FULL
        return kept

    def _put(self, batch: Batch) -> None:
        if self.full and self.failing == "put":
            raise sqlite3.OperationalError("database or disk is full")
        super()._put(batch)


def _lines() -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": f"c{n}"}]}}) for n in range(NUM_LINES)).encode()


async def _full_disk_batch(root, failing: str):
    sent: list[str] = []
    never_retrieved: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: never_retrieved.append(context))

    async def chat(request: Request):
        body = await request.json()
        sent.append(body["messages"][0]["content"])
        await asyncio.sleep(0.01)
        return JSONResponse({"id": "chatcmpl-1", "object": "chat.completion"})

    keys = KeyRing((TenantConfig("a", ()),))
    files, store = FileStore(root / "files"), FillingStore(root, failing)
    runner = BatchRunner(store, files, lambda: keys, concurrency=CONCURRENCY)
    await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
    upload = await files.add_bytes("a", "in.jsonl", "batch", _lines())
    await runner.create(Batch("batch_9", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))

    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + 3.0
    while "batch_9" in runner._tasks:   # the run stops once a result cannot be kept
        assert loop.time() < deadline_s, f"still sending while the disk is full: {len(sent)} requests sent"
        await asyncio.sleep(0.005)
    sent_while_full = len(sent)
    gc.collect()   # a failure nothing retrieved is reported when its task is collected
    kept_while_full = len(await store.results("batch_9"))

    store.full = False   # the disk has room again: the batch goes on with the next adoption
    deadline_s = loop.time() + 10.0
    while (batch := runner.current(await store.get("a", "batch_9"))).status != "completed":
        assert loop.time() < deadline_s, batch
        await asyncio.sleep(0.01)
    output = (await files.read("a", batch.output_file_id)).splitlines()
    await runner.stop()
    gc.collect()
    store.close()
    files.close()
    return batch, output, sent, sent_while_full, kept_while_full, never_retrieved


@pytest.mark.parametrize("failing", ["append", "put"])
def test_a_full_disk_stops_the_batch_which_goes_on_once_there_is_room(tmp_path, monkeypatch, caplog, failing):
    monkeypatch.setattr(gateway.batch_adoption, "ADOPT_EVERY_S", 0.3)
    caplog.set_level(logging.INFO, "stepahead.gateway")
    batch, output, sent, sent_while_full, kept_while_full, never_retrieved = asyncio.run(
        _full_disk_batch(tmp_path, failing))

    assert never_retrieved == []   # no "Task exception was never retrieved"
    # stopped at the first result not kept: only the requests already in flight were sent after it
    assert sent_while_full <= KEPT_BEFORE_FULL + CONCURRENCY
    assert kept_while_full >= KEPT_BEFORE_FULL   # the results kept before stay
    stopped = [record for record in caplog.records if "could not be kept" in record.getMessage()]
    assert len(stopped) == 1 and stopped[0].exc_info is None   # one line, not a traceback per request
    assert not [record for record in caplog.records if record.exc_info]
    # the batch completed, each request's result once; only those whose result was not kept ran again
    assert (batch.status, batch.completed, batch.failed, batch.total) == ("completed", NUM_LINES, 0, NUM_LINES)
    custom_ids = [json.loads(line)["custom_id"] for line in output]
    assert sorted(custom_ids) == sorted(f"r{n}" for n in range(NUM_LINES))
    assert len(sent) <= NUM_LINES + CONCURRENCY and sorted(set(sent)) == sorted(f"c{n}" for n in range(NUM_LINES))
