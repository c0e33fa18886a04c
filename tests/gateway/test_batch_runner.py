"""The batch runner against a stand-in app: requests turned away for now go again, a
batch past its window expires with the rest in its error file, every request gets one
result line, and the internal key names the batch's tenant only while it runs."""
import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_lines import BATCH_HEADER
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.file_store import FileStore


def _app(seen: list[tuple[str, str]], keys: KeyRing, busy_first: bool):
    """Chat completions that answer 429 to each request's first try when `busy_first`."""
    async def chat(request: Request):
        body = await request.json()
        tenant = keys.authenticate(request.headers["authorization"])
        seen.append((tenant, body["messages"][0]["content"]))
        if busy_first and sum(content == body["messages"][0]["content"] for _, content in seen) == 1:
            return JSONResponse({"error": {"message": "busy", "type": "requests", "param": None,
                                           "code": "rate_limit_exceeded"}}, status_code=429,
                                headers={"retry-after": "0"})
        assert request.headers[BATCH_HEADER].startswith("batch_")
        return JSONResponse({"id": f"chatcmpl-{body['messages'][0]['content']}", "object": "chat.completion",
                             "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
                            headers={"x-request-id": f"chatcmpl-{body['messages'][0]['content']}"})
    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _lines(count: int) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": f"c{n}"}]}}) for n in range(count)).encode()


async def _run(count: int, *, busy_first: bool = False, clock=None) -> tuple[Batch, dict, dict, list, KeyRing]:
    keys = KeyRing((TenantConfig("a", ()),))
    seen: list[tuple[str, str]] = []
    files = FileStore(None)
    runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=2, **({"clock": clock} if clock else {}))
    await runner.start(_app(seen, keys, busy_first))
    upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(count))
    batch = await runner.create(Batch("batch_1", "a", "/v1/chat/completions", upload.id, "24h", 0, 100))
    while batch.status not in ("completed", "expired", "cancelled"):
        await asyncio.sleep(0.01)
        batch = runner.current(await runner.store.get("a", "batch_1"))
    output = {} if batch.output_file_id is None else {
        line["custom_id"]: line for line in map(json.loads, (await files.read("a", batch.output_file_id)).splitlines())}
    errors = {} if batch.error_file_id is None else {
        line["custom_id"]: line for line in map(json.loads, (await files.read("a", batch.error_file_id)).splitlines())}
    runner.store.close()
    files.close()
    return batch, output, errors, seen, keys


def test_requests_turned_away_for_now_go_again_and_each_gets_one_result():
    batch, output, errors, seen, keys = asyncio.run(_run(7, busy_first=True, clock=lambda: 10.0))
    assert batch.status == "completed" and (batch.completed, batch.failed, batch.total) == (7, 0, 7)
    assert sorted(output) == [f"r{n}" for n in range(7)] and errors == {}
    assert len(seen) == 14 and {tenant for tenant, _ in seen} == {"a"}   # each tried twice, as tenant "a"
    assert output["r4"]["response"]["request_id"] == "chatcmpl-c4"
    assert batch.usage == {"input_tokens": 21, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 14,
                           "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 35}
    assert keys.internal == {}   # the batch's key was dropped when it ended


def test_a_batch_past_its_window_expires_with_its_unsent_requests_in_the_error_file():
    ticks = iter(range(0, 10_000, 30))   # the clock passes the window (100 s) after a few calls

    batch, output, errors, seen, _ = asyncio.run(_run(12, clock=lambda: float(next(ticks))))
    assert batch.status == "expired" and batch.times["expired_at"] >= 100
    assert len(output) == len(seen) < 12
    assert sorted(output) + sorted(errors) == sorted(f"r{n}" for n in range(12))
    assert {line["error"]["code"] for line in errors.values()} == {"batch_expired"}
    assert all(line["response"] is None for line in errors.values())
    assert (batch.completed, batch.failed) == (len(output), len(errors))


def test_while_others_are_in_flight_one_batch_request_runs_at_a_time():
    """`load` says two other requests are in flight for the first 0.3 s: until then the
    batch's requests go one at a time, then `concurrency` (3) at a time."""
    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files = FileStore(None)
        started_s = asyncio.get_running_loop().time()
        runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=3,
                             load=lambda: runner.num_in_flight + (2 if busy() else 0))
        most: dict[bool, int] = {True: 0, False: 0}

        def busy() -> bool:
            return asyncio.get_running_loop().time() - started_s < 0.3

        async def chat(request: Request):
            most[busy()] = max(most[busy()], runner.num_in_flight)
            await asyncio.sleep(0.03)
            return JSONResponse({"object": "chat.completion"})
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(40))
        batch = await runner.create(Batch("batch_2", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        while runner.current(batch).status != "completed":
            await asyncio.sleep(0.01)
        runner.store.close()
        files.close()
        return most, runner.current(batch)

    most, batch = asyncio.run(main())
    assert most == {True: 1, False: 3} and batch.completed == 40


def test_a_batch_whose_input_file_was_deleted_fails_when_it_would_go_on():
    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files, store = FileStore(None), BatchStore(None)
        await store.put(Batch("batch_3", "a", "/v1/chat/completions", "file-gone", "24h", 0, 10**10,
                              status="in_progress"))
        runner = BatchRunner(store, files, lambda: keys, concurrency=2)
        await runner.start(Starlette())
        while runner.current(await store.get("a", "batch_3")).status == "in_progress":
            await asyncio.sleep(0.01)
        found = await store.get("a", "batch_3")
        store.close()
        files.close()
        return found

    found = asyncio.run(main())
    assert found.status == "failed" and found.errors[0]["code"] == "input_file_missing"
