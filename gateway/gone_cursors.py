"""Where a row that left one of a store's lists (deleted, or expired and removed) stood in
it: its id and `seq`, kept a while in the store's own SQLite file, so that an `after`
naming it still says where the next page starts. QA180: the official SDK's
`for f in client.files.list(): client.files.delete(f.id)` asks for the second page after
the first page's last id, deleted by then; a cursor is a place in the list, not a lookup
of a live object.

Invariants:
- a cursor is found only in the list its row left (its tenant's; for a conversation's
  items, that conversation's): another tenant's id, or an id never listed, stays unknown,
  so `after` naming it is the same 400 as before (no existence leak across tenants);
- a store looks for a live row first (`seq_of` is asked only when none has the id) and
  numbers a new row past its list's cursors too (`last_seq`), so a kept cursor never
  stands where a later row does;
- a cursor is kept GONE_KEPT_S after its row left, then removed by `forget_old` (at most
  FORGOTTEN_PER_SWEEP a call, which the store makes where it removes rows) or with its
  whole list (`forget_list`); past that an `after` naming it is unknown again;
- the table is made by `schema` (CREATE ... IF NOT EXISTS): a store's file made before it
  gets it at its next opening, its rows untouched.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

GONE_KEPT_S = 24 * 3600   # long past any walk page by page (the SDK asks for the next page at once)
FORGOTTEN_PER_SWEEP = 256


@dataclass(frozen=True, slots=True)
class GoneCursors:
    """The table `table` of the cursors of rows that left the lists of the table `source`,
    which has the columns `keys` (one list per value of them), `id` and `seq`."""

    table: str
    source: str
    keys: tuple[str, ...]

    @property
    def schema(self) -> str:
        keys = ", ".join(self.keys)
        columns = "".join(f"{key} TEXT NOT NULL, " for key in self.keys)
        return (f"CREATE TABLE IF NOT EXISTS {self.table} ({columns}id TEXT NOT NULL, seq INTEGER NOT NULL, "
                f"gone_s REAL NOT NULL, PRIMARY KEY ({keys}, id));\n"
                f"CREATE INDEX IF NOT EXISTS {self.table}_by_seq ON {self.table} ({keys}, seq);\n"
                f"CREATE INDEX IF NOT EXISTS {self.table}_by_age ON {self.table} (gone_s);\n")

    @property
    def _in_list(self) -> str:
        return " AND ".join(f"{key} = ?" for key in self.keys)

    def keep(self, db: sqlite3.Connection, listed_in: tuple[str, ...], row_id: str, now_s: float) -> None:
        """Keep where `source`'s row `row_id` of the list `listed_in` (the values of `keys`)
        stands: call it in the transaction that removes the row, before the row goes."""
        keys = ", ".join(self.keys)
        db.execute(f"INSERT OR REPLACE INTO {self.table} ({keys}, id, seq, gone_s) SELECT {keys}, id, seq, ? "
                   f"FROM {self.source} WHERE {self._in_list} AND id = ? AND seq IS NOT NULL",
                   (now_s, *listed_in, row_id))

    def seq_of(self, db: sqlite3.Connection, listed_in: tuple[str, ...], row_id: str) -> int | None:
        """The `seq` the row `row_id` had in the list `listed_in` when it left, None when no
        cursor of it is kept there."""
        row = db.execute(f"SELECT seq FROM {self.table} WHERE {self._in_list} AND id = ?",
                         (*listed_in, row_id)).fetchone()
        return None if row is None else row[0]

    def last_seq(self, without: int = 0) -> str:
        """SQL for the highest `seq` a list has given, to its rows in `source` and to those
        gone (its cursors), `without` when it has none: a new row takes one past it. Its
        arguments are the list's values of `keys`, twice. Two indexed look-ups."""
        return (f"(SELECT MAX((SELECT COALESCE(MAX(seq), {int(without)}) FROM {self.source} WHERE {self._in_list}), "
                f"(SELECT COALESCE(MAX(seq), {int(without)}) FROM {self.table} WHERE {self._in_list})))")

    def forget_list(self, db: sqlite3.Connection, listed_in: tuple[str, ...]) -> None:
        """Remove the cursors of the list `listed_in` (the list itself is gone)."""
        db.execute(f"DELETE FROM {self.table} WHERE {self._in_list}", listed_in)

    def forget_old(self, db: sqlite3.Connection, now_s: float) -> None:
        """Remove up to FORGOTTEN_PER_SWEEP cursors kept GONE_KEPT_S or longer, oldest first;
        a read alone when there is none (a list's call: no write lock taken for nothing)."""
        cutoff = now_s - GONE_KEPT_S
        if db.execute(f"SELECT 1 FROM {self.table} WHERE gone_s <= ? LIMIT 1", (cutoff,)).fetchone() is None:
            return
        db.execute(f"DELETE FROM {self.table} WHERE rowid IN (SELECT rowid FROM {self.table} WHERE gone_s <= ? "
                   f"ORDER BY gone_s LIMIT ?)", (cutoff, FORGOTTEN_PER_SWEEP))
