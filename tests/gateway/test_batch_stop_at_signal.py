"""Once the gateway's stop began (`BatchRunner.begin_stop`, at the signal), a batch sends no
further request: those in flight finish and keep their results, the rest go on at the next
start (QA125: lines kept starting through the connection drain, slowing the requests it
waited for, and were cut and sent again at the next start)."""
import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.batch_store import UNFINISHED
from tests.gateway.test_batch_runner import _batch_on, _close, _lines


def test_a_stopping_gateway_sends_no_further_batch_request_and_keeps_the_results_in_flight():
    sent: list[str] = []
    go_on = asyncio.Event()

    async def chat(request: Request):
        sent.append((await request.json())["messages"][0]["content"])
        await go_on.wait()
        return JSONResponse({"object": "chat.completion", "usage": {
            "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})

    async def main():
        runner, files, batch = await _batch_on(chat, _lines(10), concurrency=2)
        while len(sent) < 2:
            await asyncio.sleep(0.005)
        runner.begin_stop()
        go_on.set()   # the two in flight finish during the drain
        deadline_s = asyncio.get_running_loop().time() + 10
        while len(results := await runner.store.results(batch.id)) < 2:
            assert asyncio.get_running_loop().time() < deadline_s
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)   # time enough for a third line to be sent, were any
        results = await runner.store.results(batch.id)
        record = runner.current(await runner.store.get("a", batch.id))
        await runner.stop()
        _close(runner, files)
        return results, record

    results, record = asyncio.run(main())
    assert sorted(sent) == ["c0", "c1"]   # nothing sent after the stop began
    assert sorted(result["custom_id"] for result in results) == ["r0", "r1"]   # in flight: kept
    assert record.status in UNFINISHED   # not finished: it goes on at the next start
