"""A batch whose tenant a reload removes (or a start lacks) waits, sending nothing, and
goes on when the tenant is back: no request of it is lost to a 401."""
import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.errors import ApiError
from gateway.file_store import FileStore
from tests.gateway.test_batch_runner import _ended, _lines, _lines_of


def test_a_batch_waits_while_its_tenant_is_removed_and_goes_on_when_it_is_back():
    tries: list[tuple[str, int]] = []   # (content, status answered)

    async def main():
        ring = {"now": KeyRing((TenantConfig("a", ()), TenantConfig("b", ())))}
        loop = asyncio.get_running_loop()

        async def chat(request: Request):
            content = (await request.json())["messages"][0]["content"]
            await asyncio.sleep(0.05)   # in flight while the reload lands
            try:
                ring["now"].authenticate(request.headers["authorization"])
            except ApiError as error:
                tries.append((content, error.status))
                return JSONResponse(error.body(), status_code=error.status)
            tries.append((content, 200))
            return JSONResponse({"object": "chat.completion"})

        files = FileStore(None)
        runner = BatchRunner(BatchStore(None), files, lambda: ring["now"], concurrency=2)
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(8))
        batch = await runner.create(Batch("batch_r", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        while len(tries) < 2:
            await asyncio.sleep(0.005)
        ring["now"] = KeyRing((TenantConfig("b", ()),), ring["now"].internal)   # a reload removes "a"
        removed_s = loop.time()
        await asyncio.sleep(1.5)
        sent_while_removed = [entry for entry in tries[2:]]
        ring["now"] = KeyRing((TenantConfig("a", ()), TenantConfig("b", ())), ring["now"].internal)   # back
        done = await _ended(runner, batch.id, timeout_s=10)
        errors = await _lines_of(files, done.error_file_id)
        output = await _lines_of(files, done.output_file_id)
        runner.store.close()
        files.close()
        return done, output, errors, sent_while_removed, loop.time() - removed_s

    done, output, errors, sent_while_removed, _ = asyncio.run(main())
    assert done.status == "completed" and (done.completed, done.failed, done.total) == (8, 0, 8)
    assert sorted(output) == sorted(f"r{n}" for n in range(8)) and errors == {}
    # at most the requests in flight at the reload were refused, and each went again later
    assert all(status == 401 for _, status in sent_while_removed) and len(sent_while_removed) <= 2
    refused = {content for content, status in tries if status == 401}
    assert refused <= {content for content, status in tries if status == 200}


def test_a_batch_whose_tenant_is_missing_at_the_start_expires_unsent_without_a_401():
    ticks = iter(range(0, 10_000, 40))   # the window (100 s) passes after a few looks

    async def main():
        keys = KeyRing((TenantConfig("b", ()),))   # started without tenant "a"
        files, store = FileStore(None), BatchStore(None)
        upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(3))
        await store.put(Batch("batch_m", "a", "/v1/chat/completions", upload.id, "24h", 0, 100,
                              status="in_progress", total=3))
        sent: list[str] = []

        async def chat(request: Request):
            sent.append(request.headers["authorization"])
            return JSONResponse({"object": "chat.completion"})
        runner = BatchRunner(store, files, lambda: keys, concurrency=2, clock=lambda: float(next(ticks)))
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        done = await _ended(runner, "batch_m", timeout_s=10)
        errors = await _lines_of(files, done.error_file_id)
        store.close()
        files.close()
        return done, errors, sent

    done, errors, sent = asyncio.run(main())
    assert done.status == "expired" and sent == []
    assert sorted(errors) == ["r0", "r1", "r2"] and {line["error"]["code"] for line in errors.values()} == {
        "batch_expired"}
