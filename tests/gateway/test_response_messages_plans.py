"""A stored response's messages are found by id, never by a walk of its tenant's every
message (QA189 F1: a read after a restart, or a put's or delete's reference counting, cost
O(the tenant's messages): 33 s for one 2,000-message turn, every tenant waiting behind it on
the archive's one thread); a file whose triggers an earlier build made gets today's."""
from __future__ import annotations

import sqlite3

from gateway.response_archive import ResponseArchive
from gateway.response_messages import ROW_DIGESTS, TRIGGERS
from gateway.response_store import StoredResponse


def _plan(db: sqlite3.Connection, sql: str) -> list[str]:
    return [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql)]


def _walks_tenant(plan: list[str]) -> bool:
    """Whether a plan searches response_messages by tenant (every message of it) or scans it."""
    return any(("response_messages" in step or " m " in f" {step} ") and "rowid=?" not in step
               and ("SEARCH" in step or "SCAN" in step) and "json_each" not in step and " j " not in f" {step} "
               for step in plan)


def test_a_rows_messages_and_the_reference_counts_go_by_id(tmp_path):
    archive = ResponseArchive(tmp_path / "r.sqlite3", 10)
    db = archive.db
    read = _plan(db, f"SELECT {ROW_DIGESTS} FROM responses AS r WHERE tenant = 'a' AND id = 'x'")
    assert any("rowid=?" in step for step in read) and not _walks_tenant(read), read
    for name, sql in TRIGGERS.items():
        for statement in sql.split(" BEGIN ", 1)[1].rsplit(" END", 1)[0].split(";"):
            statement = statement.strip()
            if not statement:
                continue
            bound = statement.replace("NEW.message_ids", "'[1]'").replace("OLD.message_ids", "'[1]'")
            bound = bound.replace("NEW.tenant", "'a'").replace("OLD.tenant", "'a'").replace("NEW.id", "'x'")
            plan = _plan(db, bound)
            assert not _walks_tenant(plan), (name, bound, plan)


def test_a_file_with_an_earlier_builds_triggers_gets_todays_and_keeps_its_counts(tmp_path):
    path = tmp_path / "r.sqlite3"
    archive = ResponseArchive(path, 10)
    first = ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    archive.put("a", StoredResponse({"id": "r1", "status": "completed"}, first, ()))
    archive.close()
    with sqlite3.connect(path) as db:   # the triggers as 0310e27 made them: by tenant first
        for name, sql in TRIGGERS.items():
            db.execute(f"DROP TRIGGER {name}")
            db.execute(sql.replace("id IN (", "tenant = tenant AND id IN ("))
    reopened = ResponseArchive(path, 10)
    kept = dict(reopened.db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))
    assert kept == TRIGGERS
    reopened.put("a", StoredResponse({"id": "r2", "status": "completed"}, (*first, {"role": "user", "content": "x"}),
                                     ()))
    assert sorted(reopened.db.execute("SELECT refs FROM response_messages WHERE tenant = 'a'")) == [(1,), (2,), (2,)]
    reopened.delete("a", "r1")
    reopened.delete("a", "r2")
    assert reopened.db.execute("SELECT count(*) FROM response_messages").fetchone() == (0,)
    assert reopened.get("a", "r1") is None
