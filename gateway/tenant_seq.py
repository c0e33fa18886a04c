"""The order a tenant's rows are listed in, shared by the Files and Batch API stores: a
`seq` column rising per tenant (whole-second `created_at` and random ids cannot order rows
made in one second), numbered in SQL so gateways sharing one file never give the same.
"""
from __future__ import annotations

import sqlite3

from cache.sqlite_transaction import transaction


def next_seq(table: str) -> str:
    """SQL for the `seq` of a row `table` gets now: one past its tenant's (the argument's)
    last. NOTE: one statement, so two gateways on one file never give the same number."""
    return f"(SELECT COALESCE(MAX(seq), 0) + 1 FROM {table} WHERE tenant = ?)"


def number_unnumbered(db: sqlite3.Connection, table: str, old_order: str) -> None:
    """Give each row of `table` that has no `seq` (made before the column existed) one, in
    `old_order`, after its tenant's numbered rows; then index (tenant, seq). Idempotent."""
    with transaction(db, "BEGIN IMMEDIATE"):
        rows = db.execute(f"SELECT rowid, tenant FROM {table} WHERE seq IS NULL ORDER BY {old_order}").fetchall()
        if rows:
            last = dict(db.execute(f"SELECT tenant, COALESCE(MAX(seq), 0) FROM {table} GROUP BY tenant"))
            for rowid, tenant in rows:
                last[tenant] += 1
                db.execute(f"UPDATE {table} SET seq = ? WHERE rowid = ?", (last[tenant], rowid))
        db.execute(f"CREATE INDEX IF NOT EXISTS {table}_by_seq ON {table} (tenant, seq)")
