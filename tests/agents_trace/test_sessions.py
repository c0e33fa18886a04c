"""SessionTable: explicit ids, prefix and call-id (handoff) stitching, tenant isolation, expiry, bounds."""
from __future__ import annotations

from agents_trace.conversation import assistant_message, extend_digest, prefix_digests
from agents_trace.records import ToolCall
from agents_trace.sessions import SessionTable

BASE = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]


def _open(table, tenant, messages, now_s=0.0, explicit=None):
    opened, _ = table.open_step(tenant, explicit, prefix_digests(tenant, messages), messages,
                                now_s)
    return opened


def _close(table, tenant, opened, messages, calls=(), text=None, ended_s=1.0):
    digest = prefix_digests(tenant, messages)[-1]
    table.close_step(tenant, opened.session, opened.index, ended_s, request_digest=digest,
                     num_messages=len(messages),
                     response_digest=extend_digest(digest, assistant_message(text, calls)),
                     asked={c.call_id: c.name for c in calls})


def _continue(messages, call):
    return messages + [assistant_message(None, (call,)),
                       {"role": "tool", "tool_call_id": call.call_id, "content": "ok"}]


def test_session_table_stitches_exact_continuation():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    first = _open(table, "t", BASE)
    call = ToolCall("c1", "ls", "{}")
    _close(table, "t", first, BASE, (call,))
    second = _open(table, "t", _continue(BASE, call), now_s=2.0)
    assert (second.session, second.index, second.source) == (first.session, 1, "prefix")
    assert second.prev_ended_s == 1.0 and second.asked == {"c1": "ls"}
    assert (second.num_prefix_messages, second.prefix_step) == (2, 0)


def test_session_table_stitches_loose_continuation_when_reply_was_replaced():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    first = _open(table, "t", BASE)
    _close(table, "t", first, BASE, text="random text from a tiny model")
    scripted = _continue(BASE, ToolCall("mine", "search", "{}"))
    assert _open(table, "t", scripted).session == first.session


def test_session_table_never_crosses_tenants():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    call = ToolCall("c1", "ls", "{}")
    a = _open(table, "a", BASE)
    _close(table, "a", a, BASE, (call,))
    b = _open(table, "b", _continue(BASE, call))
    assert b.session != a.session and b.source == "new" and b.index == 0


def test_session_table_identical_starts_are_separate_and_replies_disambiguate():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    one, two = _open(table, "t", BASE), _open(table, "t", BASE)
    assert one.session != two.session
    call_one, call_two = ToolCall("c1", "ls", "{}"), ToolCall("c2", "ls", "{}")
    _close(table, "t", one, BASE, (call_one,))
    _close(table, "t", two, BASE, (call_two,))
    assert _open(table, "t", _continue(BASE, call_one)).session == one.session
    assert _open(table, "t", _continue(BASE, call_two)).session == two.session


def test_session_table_explicit_id_wins_and_resumes_numbering_after_expiry():
    table = SessionTable(idle_timeout_s=10, max_sessions=10)
    opened = _open(table, "t", BASE, explicit=("s1", "header"))
    _close(table, "t", opened, BASE, ended_s=1.0)
    assert [e.session for e in table.expire(5.0)] == []
    ended = table.expire(12.0)
    assert [(e.session, e.reason, e.num_steps) for e in ended] == [("s1", "idle", 1)]
    again = _open(table, "t", BASE, now_s=20.0, explicit=("s1", "header"))
    assert (again.session, again.index) == ("s1", 1)


def test_session_table_in_flight_session_does_not_expire():
    table = SessionTable(idle_timeout_s=10, max_sessions=10)
    _open(table, "t", BASE)
    assert table.expire(100.0) == []
    assert table.num_live == 1


def test_session_table_expired_inferred_session_is_not_continued():
    table = SessionTable(idle_timeout_s=10, max_sessions=10)
    first = _open(table, "t", BASE)
    call = ToolCall("c1", "ls", "{}")
    _close(table, "t", first, BASE, (call,))
    table.expire(50.0)
    assert _open(table, "t", _continue(BASE, call), now_s=51.0).session != first.session


def test_session_table_evicts_least_recent_when_full():
    table = SessionTable(idle_timeout_s=60, max_sessions=2)
    for name, now_s in (("a", 1.0), ("b", 2.0)):
        opened = _open(table, "t", BASE, now_s, explicit=(name, "header"))
        _close(table, "t", opened, BASE, ended_s=now_s)
    evicted = table.open_step("t", ("c", "header"), [], [], 3.0)[1]
    assert [(e.session, e.reason) for e in evicted] == [("a", "evicted")]
    assert table.num_live == 2


def test_new_session_ids_sort_by_creation_time():
    """Known answer: 1.5 s is 1,500,000 µs = 0x16e360, 13 hex digits, then 24 random bits;
    ids made later sort later (the store's keys grow at their B-trees' right edge), and two
    sessions opened in the same microsecond still get different ids."""
    table = SessionTable(idle_timeout_s=60, max_sessions=100)
    first = _open(table, "t", BASE, now_s=1.5).session
    assert first.startswith("sess_000000016e360") and len(first) == len("sess_") + 19
    int(first[len("sess_"):], 16)   # all hex
    same_instant = [_open(table, "t", BASE, now_s=1.5).session for _ in range(20)]
    assert len(set(same_instant + [first])) == 21
    later = [_open(table, "t", [{"role": "user", "content": str(n)}], now_s=1.5 + n * 1e-6).session
             for n in range(1, 40)]
    assert later == sorted(later) and later[0] > max(same_instant)
    wall_clock_now = _open(table, "t", BASE, now_s=1.8e9).session   # 13 hex digits last until 2255
    assert len(wall_clock_now) == len(first) and wall_clock_now > later[-1]


def _handoff(call, system="Answer in Spanish."):
    """What the Agents SDK sends after a handoff: the new agent's instructions as the
    system prompt, then the run so far (the user's message, the transfer call, its result)."""
    return [{"role": "system", "content": system}, BASE[1], assistant_message(None, (call,)),
            {"role": "tool", "tool_call_id": call.call_id, "content": "{\"assistant\": \"spanish\"}"}]


def test_session_table_handoff_continues_the_session_whose_call_it_answers():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    first = _open(table, "t", BASE)
    transfer = ToolCall("call_x1", "transfer_to_spanish", "{}")
    _close(table, "t", first, BASE, (transfer,), ended_s=1.0)
    second = _open(table, "t", _handoff(transfer), now_s=1.5)
    assert (second.session, second.index, second.source) == (first.session, 1, "prefix")
    assert second.prev_ended_s == 1.0 and second.asked == {"call_x1": "transfer_to_spanish"}
    # no message of the request continues step 0's request: nothing is shared as a prefix
    assert (second.num_prefix_messages, second.prefix_step) == (0, None)
    # the handed-off agent's next step extends its own conversation (a prefix match)
    _close(table, "t", second, _handoff(transfer), text="Hola", ended_s=2.0)
    third = _open(table, "t", _handoff(transfer) + [assistant_message("Hola", ()),
                                                    {"role": "user", "content": "gracias"}])
    assert (third.session, third.index, third.prefix_step) == (first.session, 2, 1)


def test_session_table_handoff_answering_another_tenants_call_opens_a_new_session():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    transfer = ToolCall("call_x1", "transfer_to_spanish", "{}")
    a = _open(table, "a", BASE)
    _close(table, "a", a, BASE, (transfer,))
    b = _open(table, "b", _handoff(transfer))
    assert b.session != a.session and (b.source, b.index) == ("new", 0)


def test_session_table_tool_result_for_an_unknown_call_opens_a_new_session():
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    first = _open(table, "t", BASE)
    _close(table, "t", first, BASE, (ToolCall("call_x1", "transfer_to_spanish", "{}"),))
    other = _open(table, "t", _handoff(ToolCall("call_zz", "transfer_to_spanish", "{}")))
    assert other.session != first.session and (other.source, other.index) == ("new", 0)
    # a result that follows an older assistant message, not the last one, does not count
    stale = _handoff(ToolCall("call_x1", "transfer_to_spanish", "{}")) + [
        assistant_message("done", ())]
    assert _open(table, "t", stale).session not in (first.session, other.session)


def test_session_table_call_index_goes_with_an_expired_session():
    table = SessionTable(idle_timeout_s=10, max_sessions=10)
    first = _open(table, "t", BASE)
    transfer = ToolCall("call_x1", "transfer_to_spanish", "{}")
    _close(table, "t", first, BASE, (transfer,), ended_s=1.0)
    assert [e.session for e in table.expire(12.0)] == [first.session]
    assert table._by_call == {} and table._by_request == {} and table._by_response == {}
    again = _open(table, "t", _handoff(transfer), now_s=13.0)
    assert again.session != first.session and (again.source, again.index) == ("new", 0)


def test_session_table_call_index_is_bounded_per_session():
    """Known answer: 4 keys a session; a step asking for 6 calls keeps its request and
    response digests and its last 2 calls; later steps push out older calls."""
    table = SessionTable(idle_timeout_s=60, max_sessions=10, max_keys_per_session=4)
    first = _open(table, "t", BASE)
    calls = tuple(ToolCall(f"call_{n}", "ls", "{}") for n in range(6))
    _close(table, "t", first, BASE, calls)
    assert len(table._by_call) == 2 and len(table._by_request) == len(table._by_response) == 1
    assert _open(table, "t", _handoff(calls[5])).session == first.session
    assert _open(table, "t", _handoff(calls[0])).session != first.session
    conversation = [{"role": "user", "content": "a long run"}]
    for n in range(20):
        opened = _open(table, "t", conversation)
        call = ToolCall(f"call_more_{n}", "ls", "{}")
        _close(table, "t", opened, conversation, (call,))
        conversation = _continue(conversation, call)
    assert opened.index == 19 and len(table.get("t", opened.session).keys) == 4
    # kept: step 18's request, step 19's call, response and request
    assert len(table._by_call) == 2 + 1
    assert _open(table, "t", _handoff(ToolCall("call_more_19", "ls", "{}"))).session == opened.session
    assert _open(table, "t", _handoff(ToolCall("call_more_18", "ls", "{}"))).session != opened.session
