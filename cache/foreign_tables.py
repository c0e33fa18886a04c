"""Tables of a SQLite file that bear the names of ours but were made by something else
(QA189 F2: a responses file holding another program's `response_messages (x TEXT)`:
`CREATE TABLE IF NOT EXISTS` kept it, and every statement that named our columns failed).

Invariant: a file's table is ours when it has every column our schema declares for it
(those a later version added, `added_columns`, aside: an older file of ours gets them when
opened), whatever other columns it has: a later version of ours may add one, even NOT NULL
without a default (this version's inserts then fail, but its reads serve, where setting the
file aside would lose them all on a rollback: QA196 F3); a name of ours that the file gives
to a view or an index is foreign. A table the file lacks is
not foreign (it is made). Only the tables we make are looked at: the file may hold others.
The check reads the file, and never writes it.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping


class ForeignTables(Exception):
    """A file whose tables are not ours; `why` says so in `set_aside`'s words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def column_names(db: sqlite3.Connection, table: str) -> list[str]:
    """The names of the columns of the file's `table`, in order; none when it has no such table."""
    return [name for (name,) in db.execute("SELECT name FROM pragma_table_info(?)", (table,))]


def declared_tables(make: Callable[[sqlite3.Connection], None]) -> dict[str, tuple[str, ...]]:
    """The tables `make` (a file's schema, added columns and migration) makes in an empty
    database, each with the names of its columns in order: what a file of ours holds."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        make(db)
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                              "AND name NOT LIKE 'sqlite_%'")]
        return {name: tuple(column_names(db, name)) for name in names}
    finally:
        db.close()


def find_foreign_tables(db: sqlite3.Connection, declared: Mapping[str, tuple[str, ...]],
                        added_columns: Iterable[tuple[str, str, str]] = ()) -> str | None:
    """Why the file `db` opened holds tables that are not ours (`set_aside`'s `why`), or
    None when each table of `declared` it has is ours (module docstring)."""
    added = {(table, column) for table, column, _ in added_columns}
    # (a name is one table's, view's or index's, whatever its case; a trigger's is apart)
    kinds = dict(db.execute("SELECT lower(name), type FROM sqlite_master WHERE type IN ('table', 'view', 'index') "
                            "AND lower(name) IN (SELECT lower(value) FROM json_each(?))", (json.dumps(list(declared)),)))
    found = []
    for table in sorted(declared):
        kind = kinds.get(table.lower())
        if kind is None:
            continue   # made when opened
        if kind != "table":
            found.append(f"{table} is {'an' if kind == 'index' else 'a'} {kind}")
            continue
        have = {name.lower() for name in column_names(db, table)}   # (column names are as case-blind)
        missing = [name for name in declared[table] if name.lower() not in have and (table, name) not in added]
        if missing:
            found.append(f"{table} lacks {', '.join(missing)}")
    if not found:
        return None
    return f"holds tables that are not ours ({'; '.join(found)})"
