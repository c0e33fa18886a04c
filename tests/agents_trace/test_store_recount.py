"""Steps an older version's writer stores in a store that counts bytes (a rollback, or an
older gateway sharing the store) are counted too (QA183 F1): a writer opening the store,
and each retention pass of one open beside that writer, counts their sessions again, so
size retention charges every tenant the bytes it stores and the tenant within its share
keeps its traces."""
from __future__ import annotations

import sqlite3
from contextlib import closing

from agents_trace.records import After, CapturedContent, SessionId, Step
from agents_trace.store import StepRow, TraceStore
from agents_trace.content_rows import REPLACE_CONTENT, content_values
from agents_trace.store_rows import INSERT_STEP, step_values
from cache.sqlite_transaction import transaction

from tests.agents_trace.helpers import sessions_by_tenant

# The session upsert of a version before sessions counted their bytes (bf8386a's
# store_rows.UPSERT_SESSION, the columns it counts): it adds the step to `num_steps` and
# knows neither `num_bytes` nor `num_counted_steps`. Its steps and content rows are
# HEAD's (INSERT_STEP and REPLACE_CONTENT have not changed since).
OLD_UPSERT_SESSION = ("INSERT INTO sessions (tenant, session, agent, source, started_s, last_s, num_steps) "
                      "VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT (tenant, session) DO UPDATE SET "
                      "started_s = MIN(sessions.started_s, excluded.started_s), "
                      "last_s = MAX(sessions.last_s, excluded.last_s), ended_s = NULL, end_reason = NULL, "
                      "num_steps = sessions.num_steps + 1")
NEVER_S = 10.0**9


def _step(tenant: str, session: str, index: int, at_s: float, text: str) -> Step:
    """Step `index` of a chat session whose request holds `text` (its prefix: the step before)."""
    messages = tuple({"role": "user", "content": f"{text} {i}"} for i in range(index + 1))
    content = CapturedContent(new_messages=messages[index:], num_prefix_messages=index,
                              prefix_step=None if index == 0 else index - 1,
                              output={"role": "assistant", "content": f"reply {index}"}, all_messages=messages)
    return Step(tenant, SessionId(session), index, "header", "chat", "m", None, at_s, at_s + 0.1,
                After("start" if index == 0 else "user"), None, None, len(messages), False, 10, 0, 2, 0.05,
                "w0", "stop", (), request_id=f"{session}-{index}", content=content)


def _session_steps(tenant: str, session: str, first_s: float, num_steps: int, text: str) -> list[Step]:
    return [_step(tenant, session, index, first_s + index, text) for index in range(num_steps)]


def _head_writes(store: TraceStore, steps: list[Step]) -> None:
    for step in steps:
        store.write([StepRow(step, None, None, None)], [])


def _old_writer_writes(db: sqlite3.Connection, steps: list[Step]) -> None:
    """Store `steps` as a version before sessions counted their bytes did: each its
    session's upsert, its row and its content, in one transaction."""
    for step in steps:
        with transaction(db, "BEGIN IMMEDIATE"):
            db.execute(OLD_UPSERT_SESSION, (step.tenant, step.session, step.agent, step.session_source,
                                            step.arrived_s, step.ended_s))
            db.execute(INSERT_STEP, step_values(StepRow(step, None, None, None), has_content=True))
            db.execute(REPLACE_CONTENT, content_values(step, step.index, step.content))


def _old_writer(path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    db.execute("PRAGMA journal_mode = WAL")
    return db


def _counted(path) -> dict[tuple[str, str], int]:
    with closing(sqlite3.connect(path)) as db:
        return {(t, s): n for t, s, n in db.execute("SELECT tenant, session, num_bytes FROM sessions")}


def _uncounted(path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT tenant, session FROM sessions WHERE num_counted_steps <> num_steps").fetchall()


def _head_only(directory, steps: list[Step]) -> dict[tuple[str, str], int]:
    """The `num_bytes` of each session when HEAD's writer stores all of `steps` (in a store
    of its own, in `directory`)."""
    directory.mkdir()
    store = TraceStore(directory / "traces.sqlite3", max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    try:
        _head_writes(store, steps)
    finally:
        store.close()
    return _counted(store.path)


def _mixed_sessions() -> tuple[list[Step], list[Step], list[Step]]:
    """(HEAD's steps, the older writer's, HEAD's after them): alpha's "a" wholly HEAD's;
    beta's "b0", "b1" wholly the older writer's; alpha's "mix" HEAD's 2 steps, the older
    writer's third, then HEAD's fourth."""
    mix = _session_steps("alpha", "mix", 200.0, 4, "m" * 1_500)
    head = [*_session_steps("alpha", "a", 100.0, 2, "a" * 1_000), *mix[:2]]
    old = [*_session_steps("beta", "b0", 300.0, 3, "é" * 2_000), *_session_steps("beta", "b1", 400.0, 2, "b" * 900),
           mix[2]]
    return head, old, mix[3:]


def test_a_writer_opening_the_store_counts_what_an_older_writer_stored_as_head_would_have(tmp_path):
    """An older writer's sessions and its step of a session HEAD started count 0 until a
    writer opens the store; then each counts what HEAD's own writer would have stored."""
    head, old, head_after = _mixed_sessions()
    expected = _head_only(tmp_path / "head", [*head, *old])
    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    _head_writes(store, head)
    store.close()
    with closing(_old_writer(path)) as db:   # a rollback: the older version serves the store meanwhile
        _old_writer_writes(db, old)
    before = _counted(path)
    assert before[("beta", "b0")] == 0 and before[("alpha", "mix")] < expected[("alpha", "mix")]
    store.open()
    try:
        assert _counted(path) == expected
        assert _uncounted(path) == []
        _head_writes(store, head_after)   # and HEAD goes on counting from there
    finally:
        store.close()
    assert _counted(path) == _head_only(tmp_path / "head_after", [*head, *old, *head_after])


def test_a_retention_pass_counts_what_an_older_writer_beside_it_stored_meanwhile(tmp_path):
    """The writer stays open while an older gateway on the same store stores steps, a
    session HEAD started among them, which HEAD then continues: the next retention pass
    counts them; a pass with none to count reads one entry of a partial index."""
    head, old, head_after = _mixed_sessions()
    expected = _head_only(tmp_path / "head", [*head, *old, *head_after])
    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    try:
        _head_writes(store, head)
        with closing(_old_writer(path)) as db:
            _old_writer_writes(db, old)
        _head_writes(store, head_after)
        assert _counted(path)[("beta", "b0")] == 0
        assert store.apply_retention(1000.0) == 0
        assert _counted(path) == expected
        assert _uncounted(path) == []
        more = _step("beta", "b1", 2, 500.0, "b" * 900)   # the older writer goes on
        with closing(_old_writer(path)) as db:
            _old_writer_writes(db, [more])
        assert _uncounted(path) == [("beta", "b1")]
        store.apply_retention(1000.0)
        assert _counted(path) == expected | _head_only(tmp_path / "more", [*old[3:5], more])
        from agents_trace.store_retention import UNCOUNTED_SQL
        plan = " ".join(str(row[-1]) for row in store.db.execute(
            f"EXPLAIN QUERY PLAN SELECT 1 FROM sessions WHERE {UNCOUNTED_SQL} LIMIT 1"))
        assert "sessions_uncounted" in plan
    finally:
        store.close()


def test_a_recount_goes_a_batch_a_transaction_until_none_is_behind(tmp_path):
    """Five sessions behind, counted two a transaction: all five, in three batches."""
    from agents_trace.store_retention import recount_uncounted

    steps = [step for i in range(5) for step in _session_steps("beta", f"b{i}", 10.0 * i, 2, "b" * 500)]
    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    try:
        with closing(_old_writer(path)) as db:
            _old_writer_writes(db, steps)
        assert len(_uncounted(path)) == 5
        assert recount_uncounted(store.db, batch_sessions=2) == 5
        assert recount_uncounted(store.db, batch_sessions=2) == 0
    finally:
        store.close()
    assert _uncounted(path) == []
    assert _counted(path) == _head_only(tmp_path / "head", steps)

def test_the_tenant_within_its_share_keeps_its_sessions_when_an_older_writer_floods(tmp_path):
    """QA183 F1 in small: alpha (HEAD's writer) stores a third of the bytes, beta (an older
    gateway on the same store) two thirds; over the limit, beta loses its oldest sessions
    and alpha keeps all of its."""
    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    try:
        for i in range(4):
            _head_writes(store, _session_steps("alpha", f"a{i}", 10.0 * i, 2, "a" * 10_000))
        with closing(_old_writer(path)) as db:
            for i in range(8):
                _old_writer_writes(db, _session_steps("beta", f"b{i}", 100.0 + 10.0 * i, 2, "b" * 10_000))
        store.max_bytes = store.used_bytes() * 3 // 4
        assert store.apply_retention(1000.0) >= 1
        kept = sessions_by_tenant(path)
        assert kept.get("alpha") == ["a0", "a1", "a2", "a3"]
        assert len(kept["beta"]) < 8 and kept["beta"] == [f"b{i}" for i in range(8 - len(kept["beta"]), 8)]
        assert store.used_bytes() <= store.max_bytes
    finally:
        store.close()


def test_the_count_of_counted_steps_is_the_writers_own_not_shown(tmp_path):
    """`num_counted_steps`, like `num_bytes`, is the writers' bookkeeping: the API and the
    CLI's session rows leave it out."""
    from agents_trace.store_queries import SessionFilter, find_session, list_sessions

    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=NEVER_S, max_bytes=10**12)
    store.open()
    try:
        _head_writes(store, _session_steps("alpha", "a", 1.0, 2, "a"))
    finally:
        store.close()
    [listed] = list_sessions(path, SessionFilter())["data"]
    [found] = find_session(path, "a", "alpha")
    assert listed["num_steps"] == found["num_steps"] == 2
    assert "num_counted_steps" not in listed and "num_counted_steps" not in found
    assert "num_bytes" not in listed and "num_bytes" not in found
