"""An admin's look-up of a session id in every tenant: the same sessions as a look-up in
each tenant, found through the primary key, never a scan of every session."""
from __future__ import annotations

import sqlite3

from agents_trace.store_queries import EVERY_TENANT_SESSION_SQL, find_session
from agents_trace.store_schema import SCHEMA

TENANTS = ["", "acme", "globex", "Ünïcode", "zeta"]


def _store(tmp_path, rows):
    path = tmp_path / "traces.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO sessions (tenant, session, source, started_s, last_s) VALUES (?, ?, 'gateway', 1, 2)",
                   rows)
    db.commit()
    db.close()
    return path


def test_every_tenant_look_up_finds_what_each_tenant_look_up_finds(tmp_path):
    rows = [(tenant, f"s{i}") for i, tenant in enumerate(TENANTS)]
    rows += [(tenant, "shared") for tenant in ("zeta", "", "globex")]
    rows += [(tenant, f"only-{tenant}-{j}") for tenant in TENANTS for j in range(20)]
    path = _store(tmp_path, rows)
    for session in ("shared", "s0", "s3", "only-acme-7", "absent"):
        expected = [found for tenant in sorted(TENANTS) for found in find_session(path, session, tenant)]
        assert find_session(path, session, None) == expected
    assert [s["tenant"] for s in find_session(path, "shared", None)] == ["", "globex", "zeta"]   # tenant order
    assert find_session(path, "absent", None) == []


def test_every_tenant_look_up_on_an_empty_store(tmp_path):
    assert find_session(_store(tmp_path, []), "s", None) == []


def test_every_tenant_look_up_seeks_the_primary_key(tmp_path):
    path = _store(tmp_path, [("acme", "s")])
    db = sqlite3.connect(path)
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + EVERY_TENANT_SESSION_SQL, ("s",))]
    db.close()
    assert "SEARCH sessions USING PRIMARY KEY (tenant=? AND session=?)" in plan
    assert not [step for step in plan if step.startswith("SCAN sessions")]
