"""Stitching without session ids where a shared first request makes the prefix ambiguous:
an agent that goes on from choice k >= 1 of an n > 1 step, an agent that edits an earlier
reply (its tool results decide), a step that ends after a later step of its session, and
the `after` of a named session's first step after a restart (QA38 M1, M2, L1)."""
from __future__ import annotations

import sqlite3

import pytest

from agents_trace.conversation import assistant_message, extend_digest, prefix_digests
from agents_trace.records import ChoiceOutput, StepResult, ToolCall
from agents_trace.sessions import SessionTable

from tests.agents_trace.helpers import ManualClock, make_tracer

FIRST = [{"role": "system", "content": "You are a helpful agent."},
         {"role": "user", "content": "Shared first question."}]


@pytest.fixture
def clock():
    return ManualClock()


def _open(table, messages, now_s=0.0, explicit=None):
    opened, _ = table.open_step("t", explicit, prefix_digests("t", messages), messages, now_s)
    return opened


def _close(table, opened, messages, calls=(), text=None, ended_s=1.0):
    digest = prefix_digests("t", messages)[-1]
    return table.close_step("t", opened.session, opened.index, ended_s, request_digest=digest,
                            num_messages=len(messages),
                            response_digest=extend_digest(digest, assistant_message(text, calls)),
                            asked={c.call_id: c.name for c in calls})


def _tool_step(messages, call, content=None):
    reply = assistant_message(None, (call,))
    if content is not None:
        reply["content"] = content
    return messages + [reply, {"role": "tool", "tool_call_id": call.call_id, "content": "ok"}]


# --- M1: n > 1 ---------------------------------------------------------------------------
def _n2_then_twin(tracer, clock):
    """X asks with n=2 (choice 0 text, choice 1 a tool call); Y, another agent, then sends
    the same first request. Returns X's and Y's step-0 contexts and X's choice 1."""
    chosen = ToolCall("call_x_c1", "get_weather", '{"city": "Paris"}')
    x0 = tracer.begin("acme", {}, {"model": "tiny", "n": 2, "messages": FIRST})
    clock.advance(0.5)
    tracer.end(x0, StepResult(finish_reason="stop", output_text="Sunny.", other_choices=(
        ChoiceOutput("tool_calls", (chosen,), None),)))
    y0 = tracer.begin("acme", {}, {"model": "tiny", "messages": FIRST})
    clock.advance(0.5)
    tracer.end(y0, StepResult(finish_reason="tool_calls",
                              tool_calls=(ToolCall("call_y0", "get_weather", "{}"),)))
    clock.advance(1.0)
    assert x0.session != y0.session
    return x0, y0, chosen


def test_an_agent_going_on_from_choice_1_stays_in_its_session_beside_a_twin(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        x0, _y0, chosen = _n2_then_twin(tracer, clock)
        x1 = tracer.begin("acme", {}, {"model": "tiny", "messages": _tool_step(FIRST, chosen)})
        assert (x1.session, x1.index, x1.session_source) == (x0.session, 1, "prefix")
        assert (x1.num_prefix_messages, x1.prefix_step) == (2, 0)
        assert x1.after.label == "tool:get_weather" and x1.gap_s == pytest.approx(1.5)
    finally:
        tracer.stop()


def test_choice_1s_calls_are_indexed_for_an_agent_that_rewrote_its_text(tmp_path, clock):
    """X keeps choice 1 but changes its text: only a loose match (as good for Y) is left,
    and the tool result answers a call only choice 1 of X's step asked for."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        x0, _y0, chosen = _n2_then_twin(tracer, clock)
        x1 = tracer.begin("acme", {}, {"model": "tiny", "messages": _tool_step(FIRST, chosen, "Checking.")})
        assert (x1.session, x1.index) == (x0.session, 1)
        assert x1.after.label == "tool:get_weather"
    finally:
        tracer.stop()


def test_session_table_indexes_every_choices_response():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    x0, y0 = _open(table, FIRST), _open(table, FIRST)
    digest = prefix_digests("t", FIRST)[-1]
    chosen = ToolCall("c1", "ls", "{}")
    table.close_step("t", x0.session, 0, 1.0, request_digest=digest, num_messages=2,
                     response_digest=extend_digest(digest, assistant_message("text", ())),
                     asked={"c1": "ls"},
                     other_response_digests=(extend_digest(digest, assistant_message(None, (chosen,))),))
    _close(table, y0, FIRST, (ToolCall("c2", "ls", "{}"),), ended_s=2.0)
    assert _open(table, _tool_step(FIRST, chosen), now_s=3.0).session == x0.session


# --- M2: an edited earlier reply -----------------------------------------------------------
def _two_tool_steps(table, now_s=0.0):
    """X: two tool steps from FIRST; returns X's session, its conversation and last call."""
    calls = ToolCall("call_x0", "get_weather", "{}"), ToolCall("call_x1", "search_docs", "{}")
    messages = FIRST
    for step, call in enumerate(calls):
        opened = _open(table, messages, now_s + step)
        _close(table, opened, messages, (call,), ended_s=now_s + step + 0.5)
        messages = _tool_step(messages, call)
    return opened.session, messages


def test_an_agent_that_edits_an_earlier_reply_stays_in_the_session_whose_call_it_answers():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    x, messages = _two_tool_steps(table)
    y0 = _open(table, FIRST, now_s=3.0)   # Y: the same first request, later
    _close(table, y0, FIRST, (ToolCall("call_y0", "get_weather", "{}"),), ended_s=3.5)
    edited = [dict(m) for m in messages]
    edited[2]["content"] = "Let me check."
    x2 = _open(table, edited, now_s=4.0)
    assert (x2.session, x2.index, x2.source) == (x, 2, "prefix")
    # the loose match on X's own step 0 stands: it is the session whose call is answered
    assert (x2.num_prefix_messages, x2.prefix_step) == (2, 0)
    assert x2.asked == {"call_x1": "search_docs"}


def test_a_loose_match_on_another_session_gives_way_to_the_call_id_match():
    """Five twins push X's step 0 out of the first request's refs (4 a key): the only loose
    match left is a twin's, whose session asked for nothing the request answers."""
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    x, messages = _two_tool_steps(table)
    for n in range(5):
        twin = _open(table, FIRST, now_s=3.0 + n)
        _close(table, twin, FIRST, (ToolCall(f"call_twin{n}", "get_weather", "{}"),), ended_s=3.5 + n)
    edited = [dict(m) for m in messages]
    edited[2]["content"] = "Let me check."
    x2 = _open(table, edited, now_s=9.0)
    assert (x2.session, x2.index, x2.source) == (x, 2, "prefix")
    assert (x2.num_prefix_messages, x2.prefix_step) == (0, None)


def test_among_equal_loose_candidates_the_session_whose_call_is_answered_wins():
    """X and Y said the same ("Hello.") to the same request and got the same user turn; X
    then rewrites its tool-call reply: the loose match at its request fits both."""
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    turn = FIRST + [assistant_message("Hello.", ()), {"role": "user", "content": "Weather?"}]
    sessions = []
    for name, now_s in (("x", 0.0), ("y", 0.1)):
        first = _open(table, FIRST, now_s)
        _close(table, first, FIRST, text="Hello.", ended_s=now_s + 0.5)
        second = _open(table, turn, now_s + 1.0)
        assert second.session == first.session
        _close(table, second, turn, (ToolCall(f"call_{name}", "get_weather", "{}"),), ended_s=now_s + 1.5)
        sessions.append(first.session)
    x_edit = _tool_step(turn, ToolCall("call_x", "get_weather", "{}"), content="Checking.")
    assert _open(table, x_edit, now_s=3.0).session == sessions[0]


def test_a_loose_match_whose_session_nobody_else_asked_stays_when_answering_unknown_calls():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    first = _open(table, FIRST)
    _close(table, first, FIRST, text="random text from a tiny model")
    other = _open(table, [{"role": "user", "content": "other"}])
    _close(table, other, [{"role": "user", "content": "other"}], (ToolCall("c_other", "ls", "{}"),))
    assert _open(table, _tool_step(FIRST, ToolCall("mine", "search", "{}"))).session == first.session


def test_a_step_that_ends_after_a_later_one_is_still_continued():
    """Steps 0 and 1 of session s in flight; step 1 ends first. Step 0's reply is indexed
    all the same (the head stays step 1), so a request going on from it finds s."""
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    one = [{"role": "user", "content": "task one"}]
    two = [{"role": "user", "content": "task two"}]
    step0 = _open(table, one, 0.0, explicit=("s", "header"))
    step1 = _open(table, two, 0.1, explicit=("s", "header"))
    late = ToolCall("call_late", "ls", "{}")
    _close(table, step1, two, (ToolCall("call_head", "cat", "{}"),), ended_s=1.0)
    assert _close(table, step0, one, (late,), ended_s=2.0) is None
    state = table.get("t", "s")
    assert (state.head_index, state.last_ended_s, state.last_asked) == (1, 1.0, {"call_head": "cat"})
    going_on = _open(table, _tool_step(one, late), now_s=3.0)
    assert (going_on.session, going_on.index, going_on.prefix_step) == ("s", 2, 0)
    handoff = [{"role": "system", "content": "new agent"}] + _tool_step(one, late)[1:]
    assert _open(table, handoff, now_s=3.0).session == "s"


# --- L1: a named session after a restart ---------------------------------------------------
def _user_turn(tracer, clock, headers, messages):
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop",
                               output_text="Done."))
    clock.advance(3.0)
    return ctx, messages + [assistant_message("Done.", ()), {"role": "user", "content": "And then?"}]


def test_a_named_sessions_user_turn_after_a_restart_is_not_a_start(tmp_path, clock):
    headers = {"x-session-id": "restarted"}
    tracer, _ = make_tracer(tmp_path, clock)
    messages = FIRST
    for _ in range(2):
        ctx, messages = _user_turn(tracer, clock, headers, messages)
    tracer.stop()
    restarted, _ = make_tracer(tmp_path, clock)   # the table knows nothing of "restarted"
    try:
        ctx, _ = _user_turn(restarted, clock, headers, messages)
        assert (ctx.index, ctx.after.label) == (0, "user")   # the writer shifts the index to 2
        first, _ = _user_turn(restarted, clock, {"x-session-id": "new-one"}, FIRST)
        assert first.after.label == "start"
    finally:
        restarted.stop()
    with sqlite3.connect(tmp_path / "traces.sqlite3") as db:
        rows = db.execute("SELECT idx, after_label FROM steps WHERE session = 'restarted' "
                          "ORDER BY idx").fetchall()
    assert rows == [(0, "start"), (1, "user"), (2, "user")]
