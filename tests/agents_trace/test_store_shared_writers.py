"""Several writers (gateways) on one trace store: a session both serve keeps every step,
and sessions a dead gateway left open end."""
from __future__ import annotations

import json
import sqlite3
import time
import uuid
from contextlib import closing

import pytest

from agents_trace import writer_batches
from agents_trace.event_queue import EventQueue
from agents_trace.export import export_lines
from agents_trace.records import After, CapturedContent, SessionId, Step, StepResult
from agents_trace.store import StepRow, TraceStore
from agents_trace.store_queries import find_session
from agents_trace.step_queries import list_steps, step_content
from agents_trace.writer import TraceWriter, WriterStats

from tests.agents_trace.helpers import ManualClock, make_tracer


@pytest.fixture
def clock():
    return ManualClock()


def _ask(tracer, clock, messages: list, session: str = "shared") -> str:
    """One chat step of `session` on `tracer`, its reply appended to `messages` with the
    next user turn; the step's request id."""
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    ctx = tracer.begin("acme", {"x-session-id": session}, {"model": "tiny", "messages": list(messages)},
                       request_id=request_id)
    clock.advance(0.5)
    reply = f"reply {len(messages)}"
    tracer.end(ctx, StepResult(num_input_tokens=10 * len(messages), num_output_tokens=3, finish_reason="stop",
                               output_text=reply, response_id=request_id))
    assert tracer.flush(5.0)
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"more {len(messages)}"}]
    clock.advance(1.0)
    return request_id


def test_a_session_two_gateways_serve_in_turn_keeps_every_step_once_with_its_content(tmp_path, clock):
    """A, B, A, B, A on one x-session-id: every step stored once under its own index (the
    first writer's as before, a taken one moved after the session's last), the summary
    counting them, and every request's messages exported whole and exact."""
    a, _ = make_tracer(tmp_path, clock, capture_content=True)
    b, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        messages = [{"role": "user", "content": "plan a trip"}]
        sent, request_ids = [], []
        for tracer in (a, b, a, b, a):
            sent.append([dict(m) for m in messages])
            request_ids.append(_ask(tracer, clock, messages))
        path = a.store_path
        steps = list_steps(path, "acme", "shared")["data"]
        assert [s["response_id"] for s in steps] == request_ids   # none replaced, in the order served
        assert [s["index"] for s in steps] == [0, 1, 2, 3, 4]
        assert find_session(path, "shared", "acme")[0]["num_steps"] == 5
        for index, step in enumerate(steps):   # a moved step keeps its own content
            assert step_content(path, "acme", "shared", index)["output"]["content"] == f"reply {len(sent[index])}"
        exported = [json.loads(line) for line in export_lines(path, "acme", "shared")][1:]
        assert [line["messages"] for line in exported] == sent
    finally:
        a.stop()
        b.stop()


def test_a_single_gateway_numbers_as_before(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        messages = [{"role": "user", "content": "hello"}]
        for _ in range(3):
            _ask(tracer, clock, messages)
        assert [s["index"] for s in list_steps(tracer.store_path, "acme", "shared")["data"]] == [0, 1, 2]
        assert [step_content(tracer.store_path, "acme", "shared", i)["prefix_step"] for i in range(3)] == [None, 0, 1]
    finally:
        tracer.stop()


def _step(own_index: int, at_s: float, messages: tuple, prefix_step: int | None = None,
          num_prefix: int = 0, session: str = "s") -> Step:
    content = CapturedContent(new_messages=messages[num_prefix:], num_prefix_messages=num_prefix,
                              prefix_step=prefix_step, output={"role": "assistant", "content": f"r{own_index}"},
                              all_messages=messages)
    return Step("acme", SessionId(session), own_index, "header", "chat", "m", None, at_s, at_s + 0.1,
                After("start" if own_index == 0 else "user"), None, None, len(messages), False, 10, 0, 2, 0.05,
                "w0", "stop", (), request_id=f"r{own_index}", content=content)


def _writer(store: TraceStore, clock=time.time, idle_timeout_s: float = 10.0) -> TraceWriter:
    return TraceWriter(events=EventQueue(10, WriterStats()), stats=WriterStats(), otel=None, store=store,
                       expire=lambda _now_s: [], clock=clock, idle_timeout_s=idle_timeout_s,
                       retention_interval_s=60.0)


def _messages(count: int) -> tuple:
    return tuple({"role": "user", "content": f"m{i}"} for i in range(count))


@pytest.mark.parametrize("part_steps", [None, 1])
def test_steps_of_one_batch_moved_past_another_writers_keep_the_step_they_extend(tmp_path, monkeypatch, part_steps):
    """Another writer takes index 1 while this one's steps 1 and 2 (2 extending 1) wait in
    one batch: they go to 2 and 3, and 3's content names 2; so too when the batch is
    written one step a transaction (`part_steps` 1: held steps go in bounded parts), step 2
    extending step 1 that an earlier part moved."""
    if part_steps is not None:
        monkeypatch.setattr(writer_batches, "WRITE_CHUNK_STEPS", part_steps)
    path = tmp_path / "t.sqlite3"
    mine, other = TraceStore(path, max_age_s=1e9, max_bytes=10**9), TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    writer = _writer(mine)
    mine.open()
    other.open()
    try:
        writer._write([writer._on_step(_step(0, 1.0, _messages(1)))], [])
        other.write([StepRow(_step(1, 2.0, _messages(3), 0, 1), None, None, None)], [])
        rows = [writer._on_step(_step(1, 3.0, _messages(3), 0, 1)), writer._on_step(_step(2, 4.0, _messages(5), 1, 3))]
        assert writer._write(rows, [])
        stored = {s["index"]: s["request_id"] for s in list_steps(path, "acme", "s")["data"]}
        assert stored == {0: "r0", 1: "r1", 2: "r1", 3: "r2"}
        assert step_content(path, "acme", "s", 3)["prefix_step"] == 2
        assert writer._open[("acme", "s")].placed == {0: 0, 1: 2, 2: 3}
        assert step_content(path, "acme", "s", 2)["prefix_step"] == 0
        # the writer's numbering moved on: its next step follows, extending its own step 2 (stored at 3)
        assert other.write([StepRow(_step(2, 5.0, _messages(5), 1, 3), None, None, None)], []) == [4]
        writer._write([writer._on_step(_step(3, 6.0, _messages(7), 2, 5))], [])
        assert list_steps(path, "acme", "s")["data"][-1]["index"] == 5
        assert step_content(path, "acme", "s", 5)["prefix_step"] == 3
        # a step extending one whose place it no longer knows is stored whole
        writer._write([writer._on_step(_step(4, 7.0, _messages(9), 0, 1))], [])
        whole = step_content(path, "acme", "s", 6)
        assert (whole["num_prefix_messages"], whole["prefix_step"]) == (1, 0)   # still known: placed[0]
        writer._open[("acme", "s")].placed.clear()
        writer._write([writer._on_step(_step(5, 8.0, _messages(11), 0, 1))], [])
        whole = step_content(path, "acme", "s", 7)
        assert (whole["num_prefix_messages"], whole["prefix_step"]) == (0, None)
        assert whole["new_messages"] == list(_messages(11))
        assert find_session(path, "s", "acme")[0]["num_steps"] == 8
    finally:
        mine.close()
        other.close()


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_sessions_a_dead_gateway_left_open_end_idle_at_their_last_step(tmp_path, clock):
    """The sweep ends in the store the open sessions idle past idle timeout + margin that
    this writer does not hold itself; a fresher one, or one it holds (a step in flight),
    stays open; a step written later opens it again."""
    path = tmp_path / "traces.sqlite3"
    dead = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    dead.open()
    dead.write([StepRow(_step(0, clock.now_s - 100.0, _messages(1)), None, None, None),   # never ended
                StepRow(_step(0, clock.now_s - 1.0, _messages(1), session="fresh"), None, None, None)], [])
    dead.close()
    tracer, _ = make_tracer(tmp_path, clock, session_idle_timeout_s=10.0, sweep_interval_s=0.02)
    try:
        _wait_until(lambda: not find_session(path, "s", "acme")[0]["is_open"])
        with closing(sqlite3.connect(path)) as db:
            ended = db.execute("SELECT end_reason, ended_s, last_s FROM sessions WHERE session = 's'").fetchone()
        assert ended == ("idle", clock.now_s - 100.0 + 0.1, clock.now_s - 100.0 + 0.1)   # ended at its last step
        assert find_session(path, "fresh", "acme")[0]["is_open"] is True   # idle < 10 s + 10 s margin
        ctx = tracer.begin("acme", {"x-session-id": "held"}, {"model": "tiny", "messages": list(_messages(1))})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=3, finish_reason="stop", output_text="x"))
        in_flight = tracer.begin("acme", {"x-session-id": "held"}, {"model": "tiny", "messages": list(_messages(3))})
        assert tracer.flush(5.0)
        clock.advance(25.0)   # "held" is idle that long in the store too, but its step still runs here
        _wait_until(lambda: not find_session(path, "fresh", "acme")[0]["is_open"])
        assert find_session(path, "fresh", "acme")[0]["end_reason"] == "idle"
        time.sleep(0.1)   # sweeps more
        assert find_session(path, "held", "acme")[0]["is_open"] is True
        assert tracer.stats.num_abandoned_ended == 2
        tracer.end(in_flight, StepResult(num_input_tokens=10, num_output_tokens=3, finish_reason="stop",
                                         output_text="y"))
        assert tracer.flush(5.0)
        assert find_session(path, "held", "acme")[0]["num_steps"] == 2
    finally:
        tracer.stop()
    mine = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    mine.open()
    try:   # the dead gateway's session goes on (a client kept its id): open again
        mine.write([StepRow(_step(1, clock.now_s, _messages(3)), None, None, None)], [])
        assert find_session(path, "s", "acme")[0]["is_open"] is True
        assert mine.end_abandoned(clock.now_s + 1.0, {("acme", "s")}) == 0   # held by the caller
        assert mine.end_abandoned(clock.now_s - 1.0, set()) == 0   # not idle that long
        assert mine.end_abandoned(clock.now_s + 1.0, set()) == 1
    finally:
        mine.close()


def test_the_sweep_finds_open_sessions_through_the_partial_index_a_writer_adds_to_an_older_store(tmp_path):
    path = tmp_path / "t.sqlite3"
    store = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    store.open()
    store.db.execute("DROP INDEX sessions_open_by_last")   # a store made before the index
    store.close()
    store.open()
    try:
        plan = " ".join(row[3] for row in store.db.execute(
            "EXPLAIN QUERY PLAN SELECT tenant, session FROM sessions WHERE ended_s IS NULL AND last_s < ?", (1.0,)))
        assert "sessions_open_by_last" in plan
    finally:
        store.close()


def test_a_gateway_stopping_leaves_open_a_session_another_gateway_stepped_since(tmp_path, clock):
    """QA35: B's shutdown ended (`shutdown`) a session A was still serving, until A's next
    step. An end names the session's last step its writer saw; a later step keeps it open."""
    a, _ = make_tracer(tmp_path, clock)
    b, _ = make_tracer(tmp_path, clock)
    messages = [{"role": "user", "content": "plan a trip"}]
    _ask(b, clock, messages)
    _ask(a, clock, messages)   # A steps the session after B's last step
    b.stop()   # B ends every session it holds: this one too, as of its own last step
    path = a.store_path
    [found] = find_session(path, "shared", "acme")
    assert found["end_reason"] is None and found["num_steps"] == 2
    a.stop()
    [found] = find_session(path, "shared", "acme")
    assert found["end_reason"] == "shutdown"
