"""At most `running_per_tenant()` batches of a tenant run at once (QA153 finding 3): one
more waits `validating` (its file checked, nothing sent), another tenant's starts at once;
the waiting one starts when one of its tenant's ends, keeps waiting across a restart, and
a cancel while it waits ends it at once."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore


def _lines(name: str, count: int) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"{name}-{n}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": "m", "messages": [{"role": "user", "content": name}]}})
                     for n in range(count)).encode()


def _app(seen: list[str], go: asyncio.Event) -> Starlette:
    async def chat(request: Request):
        name = (await request.json())["messages"][0]["content"]
        seen.append(name)
        await go.wait()
        return JSONResponse({"object": "chat.completion"})
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def _create(runner: BatchRunner, files: FileStore, tenant: str, name: str) -> Batch:
    upload = await files.add_bytes(tenant, f"{name}.jsonl", "batch", _lines(name, 3))
    return await runner.create(Batch(name, tenant, "/v1/chat/completions", upload.id, "24h", 0, 10**10))


async def _status(runner: BatchRunner, tenant: str, batch_id: str) -> Batch:
    return runner.current(await runner.store.get(tenant, batch_id))


async def _until(runner: BatchRunner, tenant: str, batch_id: str, status: str, timeout_s: float = 2) -> Batch:
    async with asyncio.timeout(timeout_s):
        while (found := await _status(runner, tenant, batch_id)).status != status:
            await asyncio.sleep(0.01)
    return found


def _runner(store: BatchStore, files: FileStore) -> BatchRunner:
    keys = KeyRing((TenantConfig("a", ()), TenantConfig("b", ())))
    return BatchRunner(store, files, lambda: keys, concurrency=2, running_per_tenant=lambda: 2)


def test_a_batch_past_the_cap_waits_validating_and_starts_when_one_ends_and_a_cancel_ends_its_wait():
    async def main():
        seen: list[str] = []
        go = asyncio.Event()
        files = FileStore(None)
        runner = _runner(BatchStore(None), files)
        await runner.start(_app(seen, go))
        first, second = [await _create(runner, files, "a", name) for name in ("batch_1", "batch_2")]
        third = await _create(runner, files, "a", "batch_3")
        fourth = await _create(runner, files, "a", "batch_4")
        other = await _create(runner, files, "b", "batch_b")   # another tenant's: its own places
        await asyncio.sleep(0.2)
        assert [first.status, second.status, third.status, fourth.status, other.status] == \
            ["in_progress", "in_progress", "validating", "validating", "in_progress"]
        assert third.total == 3 and third.as_object()["in_progress_at"] is None
        assert "batch_3" not in seen and "batch_4" not in seen and "batch_b" in seen
        await runner.cancel(fourth)   # cancelled while it waits: ends at once, nothing sent
        cancelled = await _until(runner, "a", "batch_4", "cancelled", 1)
        assert (cancelled.completed, cancelled.failed, cancelled.output_file_id) == (0, 0, None)
        assert (await _status(runner, "a", "batch_3")).status == "validating"
        await runner.cancel(first)   # one of the tenant's ends: the oldest waiting starts
        await _until(runner, "a", "batch_1", "cancelled", 1)
        await _until(runner, "a", "batch_3", "in_progress", 1)
        go.set()
        done = await _until(runner, "a", "batch_3", "completed")
        assert (done.completed, done.total) == (3, 3) and "batch_4" not in seen
        await _until(runner, "a", "batch_2", "completed")
        runner.store.close()
        files.close()
    asyncio.run(main())


def test_a_waiting_batch_waits_again_after_a_restart(tmp_path):
    async def main():
        seen: list[str] = []
        go = asyncio.Event()
        files = FileStore(None)
        runner = _runner(BatchStore(tmp_path), files)
        await runner.start(_app(seen, go))
        for name in ("batch_1", "batch_2", "batch_3"):
            await _create(runner, files, "a", name)
        await asyncio.sleep(0.1)
        await runner.stop()
        runner.store.close()
        again = _runner(BatchStore(tmp_path), files)   # the next start
        await again.start(_app(seen, go))
        await asyncio.sleep(0.2)
        assert [(await _status(again, "a", name)).status for name in ("batch_1", "batch_2", "batch_3")] == \
            ["in_progress", "in_progress", "validating"]
        assert "batch_3" not in seen
        go.set()
        for name in ("batch_1", "batch_2", "batch_3"):
            assert (await _until(again, "a", name, "completed")).completed == 3
        await again.stop()
        again.store.close()
        files.close()
    asyncio.run(main())


def test_a_waiting_batch_is_not_started_by_the_places_a_stop_frees():
    """QA166: at a graceful stop the running batches stop where they are and free their
    places, which started the waiting batches (saved `in_progress`), so the next start ran
    every batch, past the cap. A batch placed once the stop began stays `validating`."""
    async def main():
        seen: list[str] = []
        go = asyncio.Event()
        files = FileStore(None)
        runner = BatchRunner(BatchStore(None), files, lambda: KeyRing((TenantConfig("a", ()),)), concurrency=2,
                             running_per_tenant=lambda: 1)
        await runner.start(_app(seen, go))
        await _create(runner, files, "a", "batch_1")
        await _create(runner, files, "a", "batch_2")
        await asyncio.sleep(0.1)
        assert (await _status(runner, "a", "batch_2")).status == "validating"
        runner.begin_stop()   # the signal: no more requests; those in flight finish
        go.set()
        await asyncio.sleep(0.3)   # batch_1's requests finish and it stops here: its place is free
        assert (await runner.store.get("a", "batch_2")).status == "validating" and "batch_2" not in seen
        await runner.stop()
        runner.store.close()
        files.close()
    asyncio.run(main())
