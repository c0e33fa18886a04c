"""Size retention charges tenants by the bytes they store, content included (QA179 F1): a
tenant with a few huge steps loses its own sessions, never another tenant's many small
ones; a store made before sessions counted their bytes is counted once when a writer opens
it; a step that never reached a model keeps at most 64 Ki characters of its request."""
from __future__ import annotations

import json
import sqlite3

from agents_trace.records import StepResult
from agents_trace.step_queries import step_content
from agents_trace.store import TraceStore
from agents_trace.store_queries import SessionFilter, list_sessions
from agents_trace.content_rows import REFUSED_CONTENT_MAX_CHARS, TRUNCATED_ROLE

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, sessions_by_tenant

OK = StepResult(num_input_tokens=10, num_output_tokens=2, worker="w0", ttft_s=0.1, finish_reason="stop",
                output_text="ok")
REFUSED = StepResult(num_input_tokens=90_000, error="context_length_exceeded", error_message="too long")


def _one_step(tracer, clock, tenant: str, session: str, text: str, result: StepResult) -> None:
    ctx = tracer.begin(tenant, {"x-session-id": session}, {"model": "tiny",
                                                            "messages": [{"role": "user", "content": text}]})
    clock.advance(0.5)
    tracer.end(ctx, result)


def _store_of(tmp_path, alpha_result: StepResult, alpha_chars: int) -> TraceStore:
    """beta: 12 small sessions of 3 steps (36 steps), the oldest; alpha: 3 sessions of one
    step each holding `alpha_chars` characters, ended with `alpha_result`."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(12):
            run_scripted_session(tracer, clock, tenant="beta", headers={"x-session-id": f"b{i:02d}"})
        for i in range(3):
            _one_step(tracer, clock, "alpha", f"a{i}", "y" * alpha_chars, alpha_result)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    store = TraceStore(tmp_path / "traces.sqlite3", max_age_s=10**9, max_bytes=10**9)
    store.open()
    return store


def test_a_tenant_with_a_few_huge_steps_loses_its_own_oldest_not_another_tenants_small_sessions(tmp_path):
    """alpha's 3 steps hold about 3 x 60 KB, beta's 36 steps about 25 KB: over the limit,
    alpha (the most bytes, though the fewest steps) loses its oldest; beta keeps all 12."""
    store = _store_of(tmp_path, OK, 60_000)
    try:
        store.max_bytes = store.used_bytes() - 1
        assert store.apply_retention(1e9) == 1
        assert sessions_by_tenant(store.path) == {"alpha": ["a1", "a2"], "beta": [f"b{i:02d}" for i in range(12)]}
        assert store.used_bytes() <= store.max_bytes
    finally:
        store.close()


def test_refused_steps_keep_at_most_64_ki_characters_and_cost_their_own_tenant(tmp_path):
    """The audit's repro in the store: alpha's three refused 300,000-character requests keep
    64 Ki characters each, marked cut; over the limit, they are what goes, beta's 12
    sessions stay."""
    store = _store_of(tmp_path, REFUSED, 300_000)
    try:
        content = step_content(store.path, "alpha", "a0", 0)
        stored = json.dumps(content["new_messages"], ensure_ascii=False)
        assert len(stored) <= REFUSED_CONTENT_MAX_CHARS + 200
        [marker] = content["new_messages"]   # the one message is too long to keep whole
        assert marker["role"] == TRUNCATED_ROLE and marker["num_entries"] == 1
        assert marker["num_chars"] == len(json.dumps({"role": "user", "content": "y" * 300_000}))
        assert marker["content"].startswith('{"role": "user", "content": "yyy')
        store.max_bytes = store.used_bytes() - 1
        assert store.apply_retention(1e9) >= 1
        assert sessions_by_tenant(store.path)["beta"] == [f"b{i:02d}" for i in range(12)]
    finally:
        store.close()


def test_only_a_step_that_never_reached_a_model_is_cut(tmp_path):
    """A served step keeps its request whole, however long; a refused one under the cap too;
    one refused step keeps its first messages whole and cuts from the one that overflows."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        _one_step(tracer, clock, "acme", "served", "z" * 100_000, OK)
        _one_step(tracer, clock, "acme", "short", "z" * 1_000, REFUSED)
        ctx = tracer.begin("acme", {"x-session-id": "two"}, {"model": "tiny", "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "w" * 100_000}]})
        tracer.end(ctx, StepResult(error="rate_limit_exceeded", error_message="slow down"))
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    path = tmp_path / "traces.sqlite3"
    assert step_content(path, "acme", "served", 0)["new_messages"] == [{"role": "user", "content": "z" * 100_000}]
    assert step_content(path, "acme", "short", 0)["new_messages"] == [{"role": "user", "content": "z" * 1_000}]
    kept, marker = step_content(path, "acme", "two", 0)["new_messages"]
    assert kept == {"role": "system", "content": "be brief"}
    assert marker["role"] == TRUNCATED_ROLE and marker["num_entries"] == 1
    assert len(marker["content"]) > REFUSED_CONTENT_MAX_CHARS - 100


def test_a_store_made_before_sessions_counted_bytes_is_counted_once_when_a_writer_opens_it(tmp_path):
    """The backfill counts what the writer would have (rows and content alike), and the
    count is the writers' own: the API does not show it."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        run_scripted_session(tracer, clock, tenant="beta", headers={"x-session-id": "b"})
        _one_step(tracer, clock, "alpha", "a", "é" * 5_000, OK)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    path = tmp_path / "traces.sqlite3"
    db = sqlite3.connect(path)
    written = dict(((t, s), n) for t, s, n in db.execute("SELECT tenant, session, num_bytes FROM sessions"))
    assert written[("alpha", "a")] > 10_000 > written[("beta", "b")] > 1_000   # "é": 2 bytes each
    db.execute("ALTER TABLE sessions DROP COLUMN num_bytes")   # as an older version made it
    db.commit()
    db.close()
    store = TraceStore(path, max_age_s=10**9, max_bytes=10**9)
    store.open()
    try:
        counted = dict(((t, s), n) for t, s, n in store.db.execute("SELECT tenant, session, num_bytes FROM sessions"))
    finally:
        store.close()
    assert counted == written
    assert all("num_bytes" not in row for row in list_sessions(path, SessionFilter())["data"])
