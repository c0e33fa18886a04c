"""Conversation digests, session hints and `after` from request messages."""
from __future__ import annotations

from agents_trace.conversation import MAX_CLIENT_ID_CHARS, after_of, agent_name, assistant_message, \
    explicit_session, extend_digest, history_tool_names, prefix_digests
from agents_trace.records import ToolCall

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]


def test_prefix_digests_are_tenant_scoped():
    assert prefix_digests("a", MESSAGES) != prefix_digests("b", MESSAGES)
    assert prefix_digests("a", MESSAGES)[0] == prefix_digests("a", MESSAGES[:1])[0]
    assert prefix_digests("a", []) == []


def test_prefix_digests_echoed_response_matches_response_digest():
    calls = (ToolCall("call_1", "get", '{"a":1,"b":[2]}'),)
    response = extend_digest(prefix_digests("a", MESSAGES)[-1], assistant_message(None, calls))
    echoed = {"role": "assistant", "content": "", "refusal": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get", "arguments": '{"b": [2], "a": 1}'}}]}
    assert prefix_digests("a", MESSAGES + [echoed])[-1] == response
    changed = dict(echoed, tool_calls=[dict(echoed["tool_calls"][0], id="call_2")])
    assert prefix_digests("a", MESSAGES + [changed])[-1] != response


def test_prefix_digests_ignore_surrounding_whitespace_and_text_parts():
    text = MESSAGES + [{"role": "assistant", "content": "Done. "}]
    parts = MESSAGES + [{"role": "assistant", "content": [{"type": "text", "text": "Done."}]}]
    assert prefix_digests("a", text) == prefix_digests("a", parts)


def test_explicit_session_prefers_header_then_metadata_and_never_names_one_by_user():
    body = {"metadata": {"session_id": "m"}, "user": "u"}
    assert explicit_session({"x-session-id": "h"}, body) == ("h", "header")
    assert explicit_session({}, body) == ("m", "metadata")
    # `user` is OpenAI's end-user id: every run of that user would be one session
    assert explicit_session({}, {"user": "u"}) is None
    assert explicit_session({"x-session-id": "  "}, {"user": 3}) is None


def test_agent_name_from_header_or_metadata():
    assert agent_name({"x-agent-name": "planner"}, {}) == "planner"
    assert agent_name({}, {"metadata": {"agent_name": "coder"}}) == "coder"
    assert agent_name({}, {}) is None


def test_after_of_names_tool_results_by_call_id():
    history = MESSAGES + [
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"}]
    after = after_of(history, False, {})
    assert after.kind == "tools" and after.label == "tool:ls,tool:cat"
    assert [c.call_id for c in after.tools] == ["c1", "c2"]
    assert after_of(history, False, {"c1": "grep"}).tool_names == ("grep", "cat")
    assert after_of(history, False, {"c1": "grep", "c2": "head"}).tool_names == ("grep", "head")   # what was asked wins
    assert after_of(MESSAGES, True, {}).label == "start"
    assert after_of(MESSAGES, False, {}).label == "user"


def test_history_tool_names_are_cut_to_the_client_id_bound():
    long_name = "t" * (MAX_CLIENT_ID_CHARS * 40)
    messages = [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": long_name, "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}]
    assert history_tool_names(messages) == {"c1": "t" * MAX_CLIENT_ID_CHARS, "c2": "search"}
