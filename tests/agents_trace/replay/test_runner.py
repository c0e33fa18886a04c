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
