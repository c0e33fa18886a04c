"""A request whose reader stops reading (QA150 finding 1): the engine counts every token
it queued for it, read or not (`LocalEngine.num_generated`), and once more than
`max_unread_tokens` wait unread it cancels the request on its worker; what was queued is
still read, then an ErrorEvent says why. Real worker processes on the tiny model."""
from __future__ import annotations

import asyncio
import re
import time

import pytest

from shards.engine import LocalEngine
from shards.engine_streams import MAX_UNREAD_TOKENS, READ_TOO_SLOWLY
from shards.protocol import ErrorEvent, FinishEvent, SamplingParams, TokenEvent, WorkItem


@pytest.fixture
async def engine():
    eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=256, threads_per_worker=1)
    await eng.start()
    try:
        yield eng
    finally:
        await eng.stop()


def _item(eng: LocalEngine, request_id: str, max_tokens: int) -> WorkItem:
    prompt = eng.tokenizer.encode("a reader that stops reading " * 4, add_special_tokens=False)
    return WorkItem(request_id, "t", prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))


def _num_tokens(events) -> int:
    return sum(len(event.token_ids) for event in events if isinstance(event, TokenEvent))


async def _settled(eng: LocalEngine, request_id: str, until: int, timeout_s: float = 40.0) -> int:
    """`num_generated` once it reached `until`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        num = eng.num_generated(request_id)
        if num == until:
            return num
        await asyncio.sleep(0.05)
    raise AssertionError(f"num_generated stayed at {num}")


async def _worker_row(eng: LocalEngine) -> dict:
    await eng.refresh_stats()
    return eng.metrics()[0]


async def _decoded_once_idle(eng: LocalEngine, before: int) -> int:
    """The tokens the worker decoded since `before`, once it decoded some and then runs
    nothing: finished, or stopped."""
    deadline = time.monotonic() + 40.0
    while time.monotonic() < deadline:
        row = await _worker_row(eng)
        if row.get("num_decoded_tokens", 0) > before and row["num_running"] == 0:
            return row["num_decoded_tokens"] - before
    raise AssertionError("the worker was still decoding")


async def test_a_reader_that_stops_reading_leaves_every_queued_token_counted(engine):
    eng = engine
    assert eng.max_unread_tokens == MAX_UNREAD_TOKENS == 4096
    events = eng.generate(_item(eng, "stopped", 40))
    first = await anext(events)   # then the reader reads nothing more
    assert isinstance(first, TokenEvent)
    assert await _settled(eng, "stopped", 40) == 40   # the worker finished; 39 wait unread
    await events.aclose()
    assert eng.num_generated("stopped") is None   # the stream is gone with its reader


async def test_past_the_bound_the_worker_stops_and_the_queued_tokens_then_an_error_reach_the_reader(engine):
    eng = engine
    eng.max_unread_tokens = 8
    before = (await _worker_row(eng)).get("num_decoded_tokens", 0)
    events = eng.generate(_item(eng, "slow", 400))
    read = [await anext(events)]
    num_decoded = await _decoded_once_idle(eng, before)   # cut: its worker stopped
    assert num_decoded < 100, "it did not decode on toward 400 tokens for nobody"
    num_generated = eng.num_generated("slow")
    assert 9 <= num_generated <= num_decoded + 1, "cut at 9 unread (the first token came from the prefill)"
    read.extend([event async for event in events])   # the reader reads again: what was queued, then why
    assert _num_tokens(read) == num_generated
    end = read[-1]
    assert isinstance(end, ErrorEvent) and end.code == READ_TOO_SLOWLY
    assert re.fullmatch(r"the client read too slowly: (9|1\d) tokens waited unread", end.message), end.message
    assert not any(isinstance(event, (FinishEvent, ErrorEvent)) for event in read[:-1])
    row = await _worker_row(eng)
    assert row["num_running"] == 0 and row["in_flight"] == 0
    assert eng.num_generated("slow") is None and not eng._streams


async def test_a_reader_that_keeps_reading_is_never_cut_however_long_the_reply(engine):
    eng = engine
    eng.max_unread_tokens = 32   # a reply three times as long, read as it comes
    read = [event async for event in eng.generate(_item(eng, "reading", 96))]
    assert isinstance(read[-1], FinishEvent) and read[-1].num_output_tokens == 96
    assert _num_tokens(read) == 96
