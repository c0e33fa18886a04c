"""QA124 defect 2, through the batch runner: a tenant's Batch API lines took its
`max_concurrent` slots and its `max_queued` places, so its own agents' requests were
refused 429 at once while its batches ran. Its lines are now sent as batch lines
(`gateway.limits.BATCH_LINE`, seen by the app's handler over httpx's ASGI transport): they
wait outside the queue and after its interactive requests."""
import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limits import TenantLimiter
from tests.gateway.test_batch_runner import _batch_on, _close, _ended, _lines, _lines_of


def limited_chat(limiter: TenantLimiter, admitted: list[str]):
    """A stand-in chat completions handler admitted by `limiter` (10 tokens reserved, 5
    used), noting each admitted request's content in `admitted`."""
    async def chat(request: Request):
        content = (await request.json())["messages"][0]["content"]
        try:
            ticket = await limiter.acquire(10)
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
        admitted.append(content)
        limiter.release(ticket, 5)
        return JSONResponse({"object": "chat.completion", "usage": {
            "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
    return chat


async def _until(condition, timeout_s: float = 5.0) -> None:
    deadline_s = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline_s
        await asyncio.sleep(0.005)


def test_a_tenants_batch_leaves_its_queue_to_its_interactive_requests():
    """Through the batch runner (its lines sent to the app over httpx's ASGI transport):
    the tenant has one slot and one queue place, its agent's request holds the slot while
    both lines of its batch arrive. Before, a line took the queue place and the agent's next
    request was refused 429 at once; now it waits in the queue and gets the slot first, and
    the batch still completes, no line failed."""
    limiter = TenantLimiter("a", LimitsConfig(max_concurrent=1, max_queued=1))
    admitted: list[str] = []

    chat = limited_chat(limiter, admitted)

    async def main():
        agent_step = await limiter.acquire(10)
        runner, files, batch = await _batch_on(chat, _lines(2), concurrency=2)
        await _until(lambda: limiter.num_queued + getattr(limiter, "num_batch_waiting", 0) >= 1)
        next_step = asyncio.get_running_loop().create_task(limiter.acquire(10))
        await asyncio.sleep(0)
        refused = next_step.exception() if next_step.done() else None
        assert refused is None, f"the agent's request was refused while its tenant's batch ran: {refused}"
        limiter.release(agent_step, 10)
        next_ticket = await asyncio.wait_for(next_step, 1)
        assert admitted == []   # the agent's request went first: no line was admitted
        limiter.release(next_ticket, 10)
        done = await _ended(runner, batch.id)
        errors = await _lines_of(files, done.error_file_id)
        _close(runner, files)
        return done, errors

    done, errors = asyncio.run(main())
    assert (done.status, done.completed, done.failed) == ("completed", 2, 0), errors
    assert sorted(admitted) == ["c0", "c1"]
    assert (limiter.num_active, limiter.num_queued, limiter.num_reserved_tokens) == (0, 0, 0)


def test_cancelling_a_batch_gives_up_its_lines_waiting_for_a_slot():
    """Left alone in session 53 (QA129): a cancelled batch's lines waiting for a slot in
    its tenant's limiter kept waiting (the batch `cancelling` up to `queue_timeout_s`, 30 s
    here) and one a slot reached first ran in full. Now they are given up at the cancel,
    without a result, as lines not yet sent are: the batch ends `cancelled` at once, nothing
    of it runs, and the limiter holds nothing of it."""
    limiter = TenantLimiter("a", LimitsConfig(max_concurrent=1, max_queued=0))
    admitted: list[str] = []

    chat = limited_chat(limiter, admitted)

    async def main():
        agent_step = await limiter.acquire(10)
        runner, files, batch = await _batch_on(chat, _lines(3), concurrency=2)
        await _until(lambda: limiter.num_batch_waiting == 2)
        await runner.cancel(batch)
        done = await _ended(runner, batch.id, timeout_s=5.0)
        waiting_after = limiter.num_batch_waiting
        limiter.release(agent_step, 10)
        await asyncio.sleep(0.05)   # a line still waiting would be admitted now
        _close(runner, files)
        return done, waiting_after

    done, waiting_after = asyncio.run(main())
    assert (done.status, done.completed, done.failed) == ("cancelled", 0, 0)
    assert waiting_after == 0 and admitted == []
    assert (limiter.num_active, limiter.num_batch_active, limiter.num_reserved_tokens, limiter.num_spent_tokens) \
        == (0, 0, 0, 10)


def test_cancelling_a_batch_gives_up_its_requests_waiting_for_others_to_be_gone():
    """QA141 M1: with other requests in flight a batch request waits its turn
    (`_yield_to_others`) while one of another batch runs; that wait did not look at the
    cancel, so the cancelled batch stayed `cancelling` until the traffic ended. Now it is
    `cancelled` at once, nothing of it sent, and the other batch goes on."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from gateway.auth import KeyRing
    from gateway.batch_runner import BatchRunner
    from gateway.batch_store import Batch, BatchStore
    from gateway.config import TenantConfig
    from gateway.file_store import FileStore

    release = None
    seen: list[str] = []

    async def chat(request: Request):
        seen.append((await request.json())["messages"][0]["content"])
        await release.wait()
        return JSONResponse({"object": "chat.completion", "usage": {
            "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})

    async def main():
        nonlocal release
        release = asyncio.Event()
        keys = KeyRing((TenantConfig("a", ()),))
        files = FileStore(None)
        runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=2, load=lambda: 99)
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        batches = []
        for name in ("batch_a", "batch_b"):
            upload = await files.add_bytes("a", "in.jsonl", "batch", _lines(2))
            batches.append(await runner.create(Batch(name, "a", "/v1/chat/completions", upload.id, "24h", 0, 10**10)))
            await _until(lambda: runner.num_in_flight == 1)   # batch_a's first request runs; the rest wait their turn
        await asyncio.sleep(0.1)
        await runner.cancel(batches[1])
        done = await _ended(runner, "batch_b", timeout_s=3.0)
        sent_before_release = list(seen)
        release.set()
        other = await _ended(runner, "batch_a", timeout_s=10.0)
        _close(runner, files)
        return done, other, sent_before_release

    done, other, sent = asyncio.run(main())
    assert (done.status, done.completed, done.failed) == ("cancelled", 0, 0)
    assert other.status == "completed" and len(sent) == 1
