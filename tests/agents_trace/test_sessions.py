"""SessionTable: explicit ids, prefix stitching, tenant isolation, expiry, bounds."""
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
