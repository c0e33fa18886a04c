"""Known-answer and invariant tests of `n` choices (gateway/choices.py) with a scripted backend."""
import asyncio

import pytest

import dataclasses

from gateway.backend import Finished, Prepared, TextDelta, TokenChoice, ToolCallDelta, Usage
from gateway.choices import MERGED_EVENTS_PER_RUN, merged_usage, run_choices, with_choices
from gateway.errors import ApiError, server_error
from gateway.collected import Reply
from gateway.openai_format import ChunkWriter, ResponseHeader, chat_completion


class ScriptedBackend:
    """Each run logs when it starts and stops, sends `words` one per loop turn, then finishes;
    choice `fail_choice` raises after its first word."""

    def __init__(self, words=("a", "b"), fail_choice=None, hold=False):
        self.words, self.fail_choice, self.hold = words, fail_choice, hold
        self.log: list[str] = []

    async def run(self, prepared: Prepared):
        self.log.append(f"start {prepared.choice} {prepared.request_id}")
        try:
            for word in self.words:
                await asyncio.sleep(0)
                self.log.append(f"yield {word}{prepared.choice}")
                yield TextDelta(f"{word}{prepared.choice}")
                if prepared.choice == self.fail_choice:
                    raise server_error("boom")
            while self.hold:
                await asyncio.sleep(0.01)
            yield Finished("stop", Usage(10, len(self.words), 4 if prepared.choice == 0 else 10), "w0")
        finally:
            self.log.append(f"stop {prepared.choice}")


def prepared(n=1):
    return with_choices(Prepared("req", "alpha", "m", num_prompt_tokens=10, num_reserved_tokens=30), n)


async def collect(events):
    return [event async for event in events]


def test_with_choices_charges_the_prompt_once_and_every_budget():
    assert prepared(1).num_reserved_tokens == 30 and prepared(1).num_choices == 1
    three = prepared(3)
    assert (three.num_choices, three.num_reserved_tokens) == (3, 10 + 3 * 20)


def test_best_of_runs_and_charges_every_candidate_and_returns_n():
    scored = dataclasses.replace(Prepared("req", "alpha", "m", num_prompt_tokens=10, num_reserved_tokens=30), best_of=4)
    two = with_choices(scored, 2)
    assert (two.num_choices, two.num_returned, two.num_reserved_tokens) == (4, 2, 10 + 4 * 20)
    assert with_choices(scored, None).num_returned == 1


def test_reply_best_keeps_the_likeliest_per_token_best_first():
    def choice(*logprobs):
        return [TokenChoice("t", b"t", value, ()) for value in logprobs]

    reply = Reply.of(4)
    for index, (text, logprobs) in enumerate([("long", choice(-1.0, -1.0, -0.1)),  # mean -0.7, sum -2.1
                                              ("short", choice(-0.9)),             # mean -0.9, sum -0.9
                                              ("empty", None),
                                              ("best", choice(-0.2, -0.2))]):
        reply.add(TextDelta(text, logprobs, choice=index))
        reply.add(Finished("stop", Usage(10, len(logprobs or ()), 0), "w0", choice=index))
    best = reply.best(3, keep_logprobs=False)
    assert [c.text for c in best.choices] == ["best", "long", "short"]  # per token, not in total
    assert all(c.logprobs is None for c in best.choices)
    assert reply.best(1, keep_logprobs=True).first.logprobs == choice(-0.2, -0.2)
    assert [c.text for c in reply.best(4, keep_logprobs=True).choices][-1] == "empty"  # no tokens: last
    assert reply.finished.usage.num_completion_tokens == 6  # every candidate's tokens


def test_one_choice_is_the_backends_own_stream():
    backend = ScriptedBackend()
    events = asyncio.run(collect(run_choices(backend, prepared(1))))
    assert [type(e).__name__ for e in events] == ["TextDelta", "TextDelta", "Finished"]
    assert backend.log == ["start 0 req", "yield a0", "yield b0", "stop 0"]


def test_choices_are_merged_with_their_index_and_the_others_start_after_the_first_event():
    backend = ScriptedBackend()
    events = asyncio.run(collect(run_choices(backend, prepared(3))))
    assert backend.log[0] == "start 0 req-0" and {"start 1 req-1", "start 2 req-2"} < set(backend.log)
    first_other = min(backend.log.index("start 1 req-1"), backend.log.index("start 2 req-2"))
    assert first_other > backend.log.index("yield a0")  # choice 0's first event came first
    reply = Reply.of(3)
    for event in events:
        reply.add(event)
    assert [c.text for c in reply.choices] == ["a0b0", "a1b1", "a2b2"]
    assert sum(isinstance(e, Finished) for e in events) == 3 and isinstance(events[-1], Finished)
    finished = reply.finished
    assert (finished.usage.num_prompt_tokens, finished.usage.num_completion_tokens,
            finished.usage.num_cached_tokens) == (10, 6, 4)


def test_reply_is_unfinished_until_every_choice_finished():
    reply = Reply.of(2)
    reply.add(Finished("stop", Usage(5, 1, 0), choice=1))
    assert reply.finished is None
    reply.add(Finished("length", Usage(5, 3, 2), choice=0))
    assert reply.finished.finish_reason == "length" and reply.finished.usage.num_completion_tokens == 4


def test_an_error_in_one_choice_ends_the_stream_and_stops_the_others():
    backend = ScriptedBackend(words=("a", "b", "c"), fail_choice=1, hold=True)

    async def main():
        with pytest.raises(ApiError):
            await collect(run_choices(backend, prepared(3)))
    asyncio.run(main())
    assert sorted(line for line in backend.log if line.startswith("stop")) == ["stop 0", "stop 1", "stop 2"]


def test_closing_the_merged_stream_stops_every_choice():
    backend = ScriptedBackend(hold=True)

    async def main():
        events = run_choices(backend, prepared(2))
        await anext(events)
        await anext(events)
        await events.aclose()
    asyncio.run(main())
    assert sorted(line for line in backend.log if line.startswith("stop")) == ["stop 0", "stop 1"]


def test_a_reader_that_stops_reading_stops_every_choice_reading_its_backend():
    """The reader takes one event and then none for a while: each run pulls at most
    `MERGED_EVENTS_PER_RUN` events (and one waiting to be queued) from its backend stream,
    which keeps the rest unread (a local engine counts and bounds them), not all 500."""
    backend = ScriptedBackend(words=tuple(f"w{i}-" for i in range(500)))

    async def main():
        events = run_choices(backend, prepared(3))
        await anext(events)
        for _ in range(3):
            await anext(events)   # choice 0's first events: the others start
        await asyncio.sleep(0.2)
        pulled = [sum(line.startswith("yield") and line.endswith(f"-{c}") for line in backend.log) for c in range(3)]
        rest = await collect(events)   # the reader comes back: nothing was lost
        return pulled, rest
    pulled, rest = asyncio.run(main())
    assert sum(pulled) <= MERGED_EVENTS_PER_RUN * 3 + 3 + 4, pulled
    assert len(rest) == 3 * 501 - 4


def test_merged_usage_counts_the_prompt_once():
    finishes = [Finished("stop", Usage(7, 2, 3), "w1", 0.5), Finished("length", Usage(7, 5, 7), "w2", choice=1)]
    merged = merged_usage(finishes)
    assert (merged.finish_reason, merged.worker, merged.ttft_s) == ("stop", "w1", 0.5)
    assert merged.usage.to_openai()["total_tokens"] == 7 + 2 + 5


def test_several_prompts_run_in_groups_each_first_choice_at_once():
    backend = ScriptedBackend()
    two_prompts = dataclasses.replace(Prepared("req", "alpha", "m", num_prompt_tokens=10, num_reserved_tokens=30),
                                      num_prompts=2)
    request = with_choices(two_prompts, 2)
    assert (request.num_choices, request.num_per_prompt, request.num_reserved_tokens) == (4, 2, 10 + 4 * 20)
    events = asyncio.run(collect(run_choices(backend, request)))
    starts = [line for line in backend.log if line.startswith("start")]
    assert starts[:2] == ["start 0 req-0", "start 2 req-2"]  # both prompts' first choices, before any word
    assert backend.log.index("start 3 req-3") > backend.log.index("yield a2")  # after its own prompt's first event
    reply = Reply.of(4, num_prompts=2)
    for event in events:
        reply.add(event)
    usage = reply.finished.usage  # each prompt once (choices 0 and 2), every choice's tokens
    assert (usage.num_prompt_tokens, usage.num_completion_tokens, usage.num_cached_tokens) == (20, 8, 14)


def test_reply_best_ranks_within_each_prompts_group():
    reply = Reply.of(4, num_prompts=2)
    for index, value in enumerate([-2.0, -1.0, -0.5, -3.0]):
        reply.add(TextDelta(f"c{index}", [TokenChoice("t", b"t", value, ())], choice=index))
        reply.add(Finished("stop", Usage(10, 1, 0), choice=index))
    best = reply.best(1, keep_logprobs=False)
    assert [c.text for c in best.choices] == ["c1", "c2"] and best.num_prompts == 2
    assert best.finished.usage.num_prompt_tokens == 20


def test_stream_writer_indexes_choices_and_sends_usage_after_the_last_finish():
    writer = ChunkWriter(ResponseHeader("id", "m"), is_chat=True, include_usage=True, num_choices=2)
    assert writer.opening().count(b'"role":"assistant"') == 2
    assert b'"index":1' in writer.event(TextDelta("x", choice=1))
    first_finish = writer.event(Finished("stop", Usage(5, 1, 0), choice=1))
    assert b'"finish_reason":"stop"' in first_finish and b'"total_tokens"' not in first_finish
    last_finish = writer.event(Finished("length", Usage(5, 2, 0), choice=0))
    assert b'"total_tokens":8' in last_finish


def test_a_reply_cut_by_its_token_limit_finishes_as_length_even_with_tool_calls():
    cut = [ToolCallDelta(0, "call_1", "get_weather", ""), ToolCallDelta(0, None, None, '{"city": "Pa'),
           Finished("length", Usage(5, 9, 0))]
    whole = [*cut[:2], ToolCallDelta(0, None, None, 'ris"}'), Finished("stop", Usage(5, 12, 0))]
    for events, expected in ((cut, "length"), (whole, "tool_calls")):
        reply = Reply.of(1)
        writer = ChunkWriter(ResponseHeader("id", "m"), is_chat=True, include_usage=False)
        streamed = b"".join(writer.event(event) for event in events)
        for event in events:
            reply.add(event)
        body = chat_completion(ResponseHeader("id", "m"), reply, events[-1].usage)
        assert body["choices"][0]["finish_reason"] == expected
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert f'"finish_reason":"{expected}"'.encode() in streamed


def test_whole_chat_completion_lists_every_choice():
    reply = Reply.of(2)
    reply.add(TextDelta("hi", choice=1))
    body = chat_completion(ResponseHeader("id", "m"), reply, Usage(1, 1, 0))
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in body["choices"]] == ["", "hi"]   # empty: "", not null
