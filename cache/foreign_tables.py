"""Tables of a SQLite file that bear the names of ours but were made by something else
(QA189 F2: a responses file holding another program's `response_messages (x TEXT)`:
`CREATE TABLE IF NOT EXISTS` kept it, and every statement that named our columns failed).

Invariant: a file's table is ours when it has every column our schema declares for it
(those a later version added, `added_columns`, aside: an older file of ours gets them when
opened) and no column a row of ours cannot fill (NOT NULL without a default); a name of
ours that the file gives to a view or an index is foreign too. A table the file lacks is
not foreign (it is made). Only the tables we make are looked at: the file may hold others.
The check reads the file, and never writes it.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table, as `PRAGMA table_info` reports it."""

    name: str
    not_null: bool
    default: str | None


class ForeignTables(Exception):
    """A file whose tables are not ours; `why` says so in `set_aside`'s words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def columns_of(db: sqlite3.Connection, table: str) -> list[Column]:
    """The columns of the file's `table`, in order; none when it has no such table."""
    return [Column(name, bool(not_null), default) for name, not_null, default in
            db.execute('SELECT name, "notnull", dflt_value FROM pragma_table_info(?)', (table,))]


def declared_tables(make: Callable[[sqlite3.Connection], None]) -> dict[str, tuple[str, ...]]:
    """The tables `make` (a file's schema, added columns and migration) makes in an empty
    database, each with the names of its columns in order: what a file of ours holds."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        make(db)
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                              "AND name NOT LIKE 'sqlite_%'")]
        return {name: tuple(column.name for column in columns_of(db, name)) for name in names}
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
        columns = columns_of(db, table)
        have = {column.name.lower() for column in columns}   # (column names are as case-blind)
        ours = {name.lower() for name in declared[table]}
        missing = [name for name in declared[table] if name.lower() not in have and (table, name) not in added]
        unfillable = [column.name for column in columns
                      if column.name.lower() not in ours and column.not_null and column.default is None]
        if missing:
            found.append(f"{table} lacks {', '.join(missing)}")
        if unfillable:
            found.append(f"{table} has {', '.join(unfillable)} (NOT NULL, no default)")
    if not found:
        return None
    return f"holds tables that are not ours ({'; '.join(found)})"
