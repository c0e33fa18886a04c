"""The request a replayed trace line becomes."""
from __future__ import annotations

from agents_trace.replay.prompts import PromptBuilder
from agents_trace.replay.runner import ReplayOptions, _body
from cache.trace_format import TraceRecord


def test_a_flex_line_is_replayed_in_the_flex_tier_and_others_name_no_tier():
    prompts = PromptBuilder(block_size=4, vocab_size=256)
    options = ReplayOptions(base_url="http://x", api_key="k")
    flex = TraceRecord(0.0, 8, 2, session="s", hash_ids=[1, 2], service_tier="flex")
    path, body = _body(flex, prompts, options, "tiny")
    assert path == "/v1/completions" and body["service_tier"] == "flex" and len(body["prompt"]) == 8
    _, body = _body(TraceRecord(0.0, 8, 2, session="s", hash_ids=[1, 2]), prompts, options, "tiny")
    assert "service_tier" not in body


def test_a_line_with_messages_is_replayed_with_its_tools_and_tool_choice():
    prompts = PromptBuilder(block_size=4, vocab_size=256)
    options = ReplayOptions(base_url="http://x", api_key="k")
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    path, body = _body(TraceRecord(0.0, 8, 2, session="s", messages=messages, tools=tools, tool_choice=choice),
                       prompts, options, "tiny")
    assert path == "/v1/chat/completions"
    assert (body["messages"], body["tools"], body["tool_choice"]) == (messages, tools, choice)
    _, body = _body(TraceRecord(0.0, 8, 2, session="s", messages=messages), prompts, options, "tiny")
    assert "tools" not in body and "tool_choice" not in body   # none recorded: none sent
    path, body = _body(TraceRecord(0.0, 8, 2, session="s", hash_ids=[1, 2], tools=tools), prompts, options, "tiny")
    assert path == "/v1/completions" and "tools" not in body   # a token-id prompt already has the recorded length


def test_max_input_tokens_cuts_a_chat_line_as_it_cuts_a_token_id_line():
    prompts = PromptBuilder(block_size=4, vocab_size=256, max_input_tokens=100)
    options = ReplayOptions(base_url="http://x", api_key="k", max_input_tokens=100)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "word " * 2000}]
    _, body = _body(TraceRecord(0.0, 2000, 2, session="s", messages=messages), prompts, options, "tiny")
    assert body["messages"][0] == messages[0] and len(body["messages"][1]["content"]) < 1000
    _, body = _body(TraceRecord(0.0, 2000, 2, session="s", hash_ids=list(range(500))), prompts, options, "tiny")
    assert len(body["prompt"]) == 100


def test_last_due_follows_each_sessions_waits_and_each_open_lines_time():
    from agents_trace.replay.runner import last_due_s

    records = [TraceRecord(100.0, 4, 1, session="a"), TraceRecord(101.0, 4, 1),
               TraceRecord(102.0, 4, 1, session="a", gap_s=50.0), TraceRecord(130.0, 4, 1)]
    assert last_due_s(records) == (50.0, 2)   # the session's step waits its gap_s after the one before
    records[2].gap_s = None
    assert last_due_s(records) == (30.0, 3)   # then t - previous t (2 s): the open line at 130 s is last
    records[2].gap_s = 1e300   # a gap in the wrong unit
    assert last_due_s(records) == (1e300, 2)


def test_a_gateway_that_stops_answering_gets_no_new_request_while_it_is_probed(monkeypatch):
    """QA210 F1: once a request fails on its connection, no group sends until the probe
    ends, so the report's errors are the requests the gateway itself failed (those in
    flight when it went), not refusals the harness made during the probe. The lines, one
    every 20 ms, would send about 20 during the 0.4 s probe."""
    import asyncio
    import threading
    import time

    from agents_trace.replay import liveness
    from agents_trace.replay.runner import replay
    from cache.trace_format import TraceHeader
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    monkeypatch.setattr(liveness, "PROBE_DELAYS_S", (0.0, 0.2, 0.2))
    gateway = start_fake_gateway()

    def stop_after_first_request() -> None:
        deadline = time.monotonic() + 10
        while not gateway.bodies and time.monotonic() < deadline:
            time.sleep(0.002)
        gateway.stop()

    threading.Thread(target=stop_after_first_request, daemon=True).start()
    records = [TraceRecord(0.02 * i, 4, 1) for i in range(100)]
    options = ReplayOptions(base_url=gateway.base_url, api_key="k", model="m", progress=False)
    try:
        outcome = asyncio.run(replay(records, TraceHeader(block_size=4), options))
    finally:
        gateway.stop()
    errors = [r for r in outcome.results if r.error]
    assert outcome.gateway_stopped is not None and "got no answer either" in outcome.gateway_stopped
    # those in flight as it went (one or two, three on a loaded machine); the old code's 20 or so
    assert 1 <= len(errors) <= 3, [r.error for r in errors]
    assert len(outcome.results) <= len(errors) + 2   # the answered first request (and perhaps one more)


def test_sent_as_one_token_counts_lines_of_0_input_or_output_tokens_but_not_a_chat_lines_input():
    from agents_trace.replay.runner import sent_as_one_token

    messages = [{"role": "user", "content": "hi"}]
    records = [TraceRecord(0.0, 0, 0), TraceRecord(0.0, 0, 2), TraceRecord(0.0, 4, 0), TraceRecord(0.0, 4, 2),
               TraceRecord(0.0, 0, 2, session="s", messages=messages)]
    assert sent_as_one_token(records) == 3
    prompts = PromptBuilder(block_size=4, vocab_size=256)
    options = ReplayOptions(base_url="http://x", api_key="k")
    _, body = _body(records[0], prompts, options, "tiny", 0)
    assert (len(body["prompt"]), body["max_tokens"]) == (1, 1)
