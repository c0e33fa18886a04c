"""QA97 finding 1: a batch of lines without max_tokens on a budgeted tenant. Each line
reserves its share of all the budget left, so a line sent while another runs is over the
budget for the moment: it must wait and go again (a retryable 429), not end
`insufficient_quota` while most of the budget is unused; the budget is never passed."""
import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.budget_share import run_share
from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limiters import Limiters
from tests.gateway.test_batch_runner import _batch_on, _close, _ended, _lines, _lines_of

BUDGET, NUM_PROMPT_TOKENS, NUM_USED_TOKENS = 1500, 20, 150


def test_batch_lines_over_the_budget_only_while_others_run_wait_and_all_complete():
    limiters = Limiters({"a": LimitsConfig(token_budget=BUDGET)})
    limiter = limiters["a"]
    tries: list[str] = []
    second_arrived = asyncio.Event()

    async def chat(request: Request):
        """An open-ended chat as the gateway admits one: reserves the prompt plus its share
        of the room, is refused as the limiter says, and is charged what it used. The first
        one admitted runs until another line has arrived, so they overlap whatever the timing."""
        tries.append((await request.json())["messages"][0]["content"])
        if len(tries) >= 2:
            second_arrived.set()
        reserve = NUM_PROMPT_TOKENS + run_share(limiters.budget_room("a"), NUM_PROMPT_TOKENS, 1)
        try:
            ticket = await limiter.acquire(reserve)
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
        if len(tries) == 1:
            await asyncio.wait_for(second_arrived.wait(), timeout=5)
        used = min(reserve, NUM_USED_TOKENS)
        limiter.release(ticket, used)
        return JSONResponse({"object": "chat.completion", "usage": {
            "prompt_tokens": NUM_PROMPT_TOKENS, "completion_tokens": used - NUM_PROMPT_TOKENS, "total_tokens": used}})

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(4), concurrency=2)
        done = await _ended(runner, batch.id, timeout_s=8)
        errors = await _lines_of(files, done.error_file_id)
        _close(runner, files)
        return done, errors

    done, errors = asyncio.run(main())
    assert (done.status, done.completed, done.failed) == ("completed", 4, 0), errors
    assert sorted(tries.count(line) for line in set(tries)) == [1, 1, 1, 2]   # one refused while the other ran
    assert limiter.num_spent_tokens == 4 * NUM_USED_TOKENS <= BUDGET and limiter.num_reserved_tokens == 0
