"""The batch runner against a stand-in app: requests turned away for now go again (not
those the answer says never to retry; a cancel ends the wait), a batch past its window
expires with the rest in its error file, every request gets one result line (one that
cannot be written is its error), a batch that cannot go on fails keeping what finished,
and the internal key names the batch's tenant only while it runs."""
import asyncio
from collections.abc import Callable
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
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


def _most_at_once(count: int, concurrency: int, others: Callable[[float], int], phase_s: float,
                  admit_s: float = 0.0) -> tuple[dict[bool, int], Batch]:
    """Run a batch of `count` requests (0.1 s each, admitted `admit_s` after they are sent)
    beside `others(t)` other requests in flight at `t` seconds from the start; the most
    batch requests admitted at once before `phase_s` (True) and after it (False)."""
    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files = FileStore(None)
        started_s = asyncio.get_running_loop().time()
        admitted = 0
        most: dict[bool, int] = {True: 0, False: 0}

        def elapsed_s() -> float:
            return asyncio.get_running_loop().time() - started_s

        runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=concurrency,
                             load=lambda: admitted + others(elapsed_s()))

        async def chat(request: Request):
            nonlocal admitted
            await asyncio.sleep(admit_s)   # parsing and admission
            admitted += 1
            most[elapsed_s() < phase_s] = max(most[elapsed_s() < phase_s], admitted)
            await asyncio.sleep(0.1)
            admitted -= 1
            return JSONResponse({"object": "chat.completion"})
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(count))
        batch = await runner.create(Batch("batch_y", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
        while runner.current(batch).status != "completed":
            await asyncio.sleep(0.01)
        runner.store.close()
        files.close()
        return most, runner.current(batch)

    return asyncio.run(main())


def test_while_others_are_in_flight_one_batch_request_runs_at_a_time():
    """Two other requests are in flight for the first 0.3 s: until then the batch's
    requests go one at a time, then `concurrency` (3) at a time."""
    most, batch = _most_at_once(12, 3, lambda t: 2 if t < 0.3 else 0, 0.3)   # 3 at most in the first 0.3 s
    assert most == {True: 1, False: 3} and batch.completed == 12


def test_an_agent_sending_steps_back_to_back_keeps_the_batch_to_one_request():
    """For the first 0.6 s another request is in flight 40 ms of every 60 (an agent whose
    steps leave 20 ms gaps): no second batch request starts in a gap (QA90 saw one in half
    the samples); once the agent is gone, `concurrency` (3) run."""
    most, batch = _most_at_once(18, 3, lambda t: 1 if t < 0.6 and t % 0.06 < 0.04 else 0, 0.6)   # 6 at most by 0.6 s
    assert most == {True: 1, False: 3} and batch.completed == 18


def test_a_batch_request_not_yet_admitted_hides_no_agent_from_the_yield():
    """`load` counts admitted requests: a batch request sent but not yet admitted (here for
    10 ms) leaves `load` equal to the batch's own count while an agent runs, so one quiet
    look is no proof (QA99: a second batch request started 0.03 s after the batch was made,
    beside a busy agent)."""
    most, batch = _most_at_once(12, 2, lambda t: 1 if t < 0.6 else 0, 0.6, admit_s=0.01)   # 6 at most by 0.6 s
    assert most == {True: 1, False: 2} and batch.completed == 12


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


ENDED = ("completed", "expired", "cancelled", "failed")


async def _ended(runner: BatchRunner, batch_id: str, timeout_s: float = 10.0) -> Batch:
    """The batch once it has ended; fails the test when it has not within `timeout_s`."""
    deadline_s = asyncio.get_running_loop().time() + timeout_s
    while (batch := runner.current(await runner.store.get("a", batch_id))).status not in ENDED:
        assert asyncio.get_running_loop().time() < deadline_s, batch
        await asyncio.sleep(0.01)
    return batch


async def _lines_of(files: FileStore, file_id: str | None) -> dict[str, dict]:
    if file_id is None:
        return {}
    return {line["custom_id"]: line for line in map(json.loads, (await files.read("a", file_id)).splitlines())}


async def _batch_on(chat, data: bytes, concurrency: int = 2, root=None):
    """A runner on a stand-in app answering chat completions with `chat`, running `data`:
    (runner, files, batch)."""
    keys = KeyRing((TenantConfig("a", ()),))
    files = FileStore(None if root is None else root / "files")
    runner = BatchRunner(BatchStore(root), files, lambda: keys, concurrency=concurrency)
    await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
    upload = await files.add_bytes("a", "in.jsonl", "batch", data)
    batch = await runner.create(Batch("batch_9", "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10))
    return runner, files, batch


def _close(runner: BatchRunner, files: FileStore) -> None:
    runner.store.close()
    files.close()


def test_a_429_that_says_never_retry_is_its_requests_result_at_once():
    """Known answer: c1 is larger than the tenant's tokens per minute (429, `x-should-retry:
    false`, Retry-After 60): sent once, its 429 in the error file; the others complete."""
    tries: list[str] = []

    async def chat(request: Request):
        content = (await request.json())["messages"][0]["content"]
        tries.append(content)
        if content == "c1":
            return JSONResponse({"error": {"message": "Request too large for tenant 'a': it may use 9000 tokens, "
                                           "above the limit of 600 tokens per minute.", "type": "requests",
                                           "param": None, "code": "rate_limit_exceeded"}}, status_code=429,
                                headers={"retry-after": "60", "x-should-retry": "false"})
        return JSONResponse({"object": "chat.completion"})

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(3))
        done = await _ended(runner, batch.id, timeout_s=5)
        errors = await _lines_of(files, done.error_file_id)
        _close(runner, files)
        return done, errors

    done, errors = asyncio.run(main())
    assert done.status == "completed" and (done.completed, done.failed) == (2, 1)
    assert sorted(tries) == ["c0", "c1", "c2"]
    assert errors["r1"]["response"]["status_code"] == 429 and "tokens per minute" in \
        errors["r1"]["response"]["body"]["error"]["message"]


def test_a_cancel_ends_the_wait_before_a_retry_at_once():
    """Every try is a 429 asking for 30 s: a cancel ends the batch at once, none sent again;
    nothing of a request refused for now ran, so it is dropped with those not sent, not a
    `failed` line (QA162: a tenant's batch reserve made every cancel end with such lines)."""
    tries: list[str] = []

    async def chat(request: Request):
        tries.append((await request.json())["messages"][0]["content"])
        return JSONResponse({"error": {"message": "busy", "type": "requests", "param": None,
                                       "code": "rate_limit_exceeded"}}, status_code=429, headers={"retry-after": "30"})

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(4))
        while len(tries) < 2:
            await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        cancelled_s = loop.time()
        await runner.cancel(batch)
        done = await _ended(runner, batch.id, timeout_s=5)
        waited_s = loop.time() - cancelled_s
        errors = await _lines_of(files, done.error_file_id)
        _close(runner, files)
        return done, errors, waited_s

    done, errors, waited_s = asyncio.run(main())
    assert done.status == "cancelled" and waited_s < 2
    assert sorted(tries) == ["c0", "c1"] and errors == {} and (done.completed, done.failed) == (0, 0)


def test_a_wait_longer_than_the_runners_look_is_waited_whole_before_sending_again(monkeypatch):
    """The runner looks every MAX_RETRY_WAIT_S (here 0.05 s), but sends again only once the
    upstream's whole Retry-After (1 s) has passed: it sent every look before."""
    import gateway.batch_sending

    monkeypatch.setattr(gateway.batch_sending, "MAX_RETRY_WAIT_S", 0.05)
    sent_s: list[float] = []

    async def chat(request: Request):
        sent_s.append(asyncio.get_running_loop().time())
        if len(sent_s) == 1:
            return JSONResponse({"error": {"message": "busy", "type": "requests", "param": None,
                                           "code": "rate_limit_exceeded"}}, status_code=429, headers={"retry-after": "1"})
        return JSONResponse({"id": "x", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(1))
        done = await _ended(runner, batch.id, timeout_s=10)
        _close(runner, files)
        return done

    done = asyncio.run(main())
    assert done.status == "completed" and len(sent_s) == 2 and sent_s[1] - sent_s[0] >= 0.95


def test_an_answer_that_cannot_be_written_is_its_requests_error_and_the_batch_goes_on():
    """c1's answer holds an unpaired surrogate (no UTF-8 form): its result is the
    `unwritable_result` error, and the batch completes with every other result."""
    async def chat(request: Request):
        content = (await request.json())["messages"][0]["content"]
        text = b'"\\ud800"' if content == "c1" else b'"fine"'
        return Response(b'{"object": "chat.completion", "text": %s}' % text, media_type="application/json")

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(4))
        done = await _ended(runner, batch.id)
        output, errors = await _lines_of(files, done.output_file_id), await _lines_of(files, done.error_file_id)
        _close(runner, files)
        return done, output, errors

    done, output, errors = asyncio.run(main())
    assert done.status == "completed" and (done.completed, done.failed) == (3, 1)
    assert sorted(output) == ["r0", "r2", "r3"] and errors["r1"]["error"]["code"] == "unwritable_result"


def test_a_batch_that_cannot_go_on_fails_with_the_files_of_what_finished(tmp_path):
    """After a restart, batch_3's input file is gone and batch_4's fails a check added since
    (a lone-surrogate custom_id): each ends `failed` with its error, and the results it
    had (one 200, one 404) are in its output and error files, not dropped."""
    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files, store = FileStore(tmp_path / "files"), BatchStore(tmp_path)
        bad = (await files.add_bytes("a", "in.jsonl", "batch", _lines(2) + b"\n" + json.dumps(
            {"custom_id": "x\ud800", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}}
        ).encode())).id
        for batch_id, file_id in (("batch_3", "file-gone"), ("batch_4", bad)):
            await store.put(Batch(batch_id, "a", "/v1/chat/completions", file_id, "24h", 0, 10**10,
                                  status="in_progress", total=3, completed=1, failed=1))
            await store.append_results(batch_id, [
                {"id": "batch_req_1", "custom_id": "r0", "error": None,
                 "response": {"status_code": 200, "request_id": "q0", "body": {"object": "chat.completion"}}},
                {"id": "batch_req_2", "custom_id": "r1", "error": None,
                 "response": {"status_code": 404, "request_id": "q1", "body": {"error": {"code": "not_found"}}}}])
        runner = BatchRunner(store, files, lambda: keys, concurrency=2)
        await runner.start(Starlette())
        found = {}
        for batch_id in ("batch_3", "batch_4"):
            done = await _ended(runner, batch_id)
            found[batch_id] = (done, await _lines_of(files, done.output_file_id),
                               await _lines_of(files, done.error_file_id))
        left = sorted(p.name for p in store.results_dir.iterdir())
        store.close()
        files.close()
        return found, left

    found, left = asyncio.run(main())
    for batch_id, code in (("batch_3", "input_file_missing"), ("batch_4", "invalid_json_line")):
        done, output, errors = found[batch_id]
        assert done.status == "failed" and done.errors[0]["code"] == code and done.times["failed_at"]
        assert (done.total, done.completed, done.failed) == (3, 1, 1)
        assert list(output) == ["r0"] and list(errors) == ["r1"]
    assert left == []   # the results are in the files now
