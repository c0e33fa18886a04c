"""The event log of a background response: readers, waiting, retention, cancelling."""
import asyncio

import pytest

from gateway.background_runs import BackgroundRun, BackgroundRuns


def sse(kind: str, sequence: int) -> bytes:
    return f'event: {kind}\ndata: {{"type": "{kind}", "sequence_number": {sequence}}}\n\n'.encode()


def a_run(tenant: str = "t", response_id: str = "resp_1") -> BackgroundRun:
    return BackgroundRun(tenant, response_id, lambda status: {"id": response_id, "status": status})


async def read_all(run: BackgroundRun, starting_after: int = -1) -> list[bytes]:
    return [event async for event in run.follow(starting_after)]


async def test_appended_blocks_split_into_one_entry_per_event():
    run = a_run()
    run.append(sse("a", 0) + sse("b", 1))
    run.append(sse("c", 2))
    run.finish()
    assert await read_all(run) == [sse("a", 0), sse("b", 1), sse("c", 2)]
    assert await read_all(run, starting_after=1) == [sse("c", 2)]
    assert await read_all(run, starting_after=5) == []
    with pytest.raises(RuntimeError):
        run.append(sse("d", 3))


async def test_waiting_readers_get_each_event_and_the_end_and_one_leaving_stops_no_one():
    run = a_run()
    run.append(sse("a", 0))
    first = asyncio.create_task(read_all(run))
    leaver = asyncio.create_task(read_all(run))
    late = asyncio.create_task(read_all(run, starting_after=0))
    await asyncio.sleep(0.01)
    leaver.cancel()  # its wait must not cancel the others'
    run.append(sse("b", 1))
    await asyncio.sleep(0.01)
    assert not first.done()  # still waiting for more
    run.append(sse("c", 2))
    run.finish()
    assert await asyncio.wait_for(first, 1) == [sse("a", 0), sse("b", 1), sse("c", 2)]
    assert await asyncio.wait_for(late, 1) == [sse("b", 1), sse("c", 2)]
    assert leaver.cancelled()


async def test_runs_are_per_tenant_and_finished_ones_are_kept_up_to_the_bound():
    runs = BackgroundRuns(keep_finished=2)

    async def work(run: BackgroundRun) -> None:
        run.finish()
    started = [runs.start(a_run("t", f"resp_{i}"), work) for i in range(4)]
    other = runs.start(a_run("u", "resp_0"), work)
    await asyncio.gather(*(run.task for run in [*started, other]))
    await asyncio.sleep(0)  # the done callbacks
    assert [runs.get("t", f"resp_{i}") for i in range(4)] == [None, None, started[2], started[3]]
    assert runs.get("u", "resp_0") is other and runs.get("u", "resp_3") is None
    assert runs.num_running() == 0


async def test_cancel_waits_for_the_run_to_end_and_cancel_all_leaves_none_running():
    runs = BackgroundRuns()
    endings: list[str] = []

    async def work(run: BackgroundRun) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            endings.append(run.response_id)
        finally:
            run.finish()
    one, two, three = (runs.start(a_run("t", f"resp_{i}"), work) for i in range(3))
    await asyncio.sleep(0)
    assert runs.num_running("t") == 3 and runs.num_running("u") == 0
    await runs.cancel(one)
    assert one.is_done and endings == ["resp_0"]
    await runs.cancel(one)  # again: nothing left to stop
    await runs.cancel_all()
    assert two.is_done and three.is_done and sorted(endings) == ["resp_0", "resp_1", "resp_2"]
    assert runs.num_running() == 0
    runs.discard("t", "resp_1")
    assert runs.get("t", "resp_1") is None and runs.get("t", "resp_2") is three


async def test_cancel_all_stops_queued_runs_where_they_wait_not_after_running_them():
    """Known hazard (QA47): runs were cancelled one by one, so each freed slot went to the
    next queued run, whose cancel Python 3.11's `wait_for` could drop: every queued
    background response ran to the end while the gateway stopped."""
    from gateway.config import LimitsConfig
    from gateway.limits import TenantLimiter

    runs, limiter, ran = BackgroundRuns(), TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=8)), []

    async def work(run: BackgroundRun) -> None:
        try:
            ticket = await limiter.acquire(1)
            try:
                ran.append(run.response_id)
                await asyncio.sleep(0.2)   # a short generation, so a lost cancel shows as a run, not a hang
            finally:
                limiter.release(ticket, 1)
        finally:
            run.finish()
    started = [runs.start(a_run("t", f"resp_{i}"), work) for i in range(6)]
    await asyncio.sleep(0.01)
    assert ran == ["resp_0"] and limiter.num_queued == 5
    await runs.cancel_all()
    assert all(run.is_done for run in started) and ran == ["resp_0"]
    assert limiter.num_active == 0 and limiter.num_queued == 0
