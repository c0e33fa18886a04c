"""A tenant's batches share its sending (QA162 N1): beside a worker that serves the newest
request first (as a local engine served the prompts sent after theirs was cached before
the ones sent earlier), each of three batches makes progress; and a cancel ends a batch
within moments though its requests are with the app, admitted, their results dropped."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_line_turn import BATCH_LINE
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore


def _lines(name: str, count: int) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"{name}-{n}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": "m", "messages": [{"role": "user", "content": f"{name}-{n}"}]}})
                     for n in range(count)).encode()


async def _start(app, concurrency: int = 2) -> tuple[BatchRunner, FileStore]:
    keys = KeyRing((TenantConfig("a", ()),))
    files = FileStore(None)
    runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=concurrency)
    await runner.start(Starlette(routes=[Route("/v1/chat/completions", app, methods=["POST"])]))
    return runner, files


async def _create(runner: BatchRunner, files: FileStore, name: str, count: int) -> Batch:
    upload = await files.add_bytes("a", f"{name}.jsonl", "batch", _lines(name, count))
    return await runner.create(Batch(name, "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))


def _answer(body: dict) -> JSONResponse:
    return JSONResponse({"object": "chat.completion", "id": body["messages"][0]["content"]})


def test_several_batches_of_one_tenant_each_make_progress():
    async def main():
        stack: list[asyncio.Future] = []   # the requests waiting for the worker: the newest is served first

        async def chat(request: Request):
            body = await request.json()
            BATCH_LINE.get().is_admitted = True   # (as the tenant's limiter marks a line it admits)
            done = asyncio.get_running_loop().create_future()
            stack.append(done)
            await done
            return _answer(body)

        async def worker():
            while True:
                await asyncio.sleep(0.005)
                while stack:
                    done = stack.pop()
                    if not done.done():
                        await asyncio.sleep(0.005)
                        if not done.done():
                            done.set_result(None)
                        break
        serving = asyncio.get_running_loop().create_task(worker())
        runner, files = await _start(chat)
        batches = [await _create(runner, files, f"batch_{n}", 400) for n in range(3)]
        await asyncio.sleep(1.5)
        counts = [runner.current(batch).completed for batch in batches]
        for batch in batches:
            await runner.cancel(batch)
        async with asyncio.timeout(5):
            while [runner.current(await runner.store.get("a", batch.id)).status
                   for batch in batches] != ["cancelled"] * 3:
                await asyncio.sleep(0.01)
        serving.cancel()
        runner.store.close()
        files.close()
        return counts
    counts = asyncio.run(main())
    assert sum(counts) >= 30, counts
    assert min(counts) >= max(counts) // 4, counts   # each batch a fair part (round-robin), none starved


def test_a_cancel_ends_the_batch_at_once_though_its_requests_run_and_keeps_the_counts_right():
    async def main():
        hang = asyncio.Event()   # never set: the requests after the first three run until given up

        async def chat(request: Request):
            body = await request.json()
            BATCH_LINE.get().is_admitted = True   # admitted: nothing waits in the limiter
            if int(body["messages"][0]["content"].rsplit("-", 1)[1]) >= 3:
                await hang.wait()
            return _answer(body)
        runner, files = await _start(chat)
        batch = await _create(runner, files, "batch_c", 10)
        async with asyncio.timeout(3):
            while runner.current(batch).completed < 3:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)   # two requests with the app, admitted
        loop = asyncio.get_running_loop()
        cancelled_s = loop.time()
        await runner.cancel(batch)
        try:
            async with asyncio.timeout(2):
                while (found := runner.current(await runner.store.get("a", batch.id))).status != "cancelled":
                    await asyncio.sleep(0.01)
            took_s = loop.time() - cancelled_s
            output = (await files.read("a", found.output_file_id)).splitlines()
            return found, took_s, output
        finally:
            hang.set()
            await runner.stop()
            runner.store.close()
            files.close()
    found, took_s, output = asyncio.run(main())
    assert took_s < 1.0
    assert (found.completed, found.failed, found.total) == (3, 0, 10) and found.error_file_id is None
    assert sorted(json.loads(line)["custom_id"] for line in output) == ["batch_c-0", "batch_c-1", "batch_c-2"]
