"""Stored Responses on disk (SQLite), so `previous_response_id` survives a restart.

Only the response store's one archive thread calls this class, never the event loop.
Invariants:
- each tenant keeps at most `capacity` rows; the least recently used (stored or read)
  leave first, but for an unfinished background response's row, which stays until its
  run ends (`response_store`), and for the row a put just stored (`JUST_STORED`): so a
  tenant may hold more than `capacity` rows while unfinished runs fill its place (runs of
  other gateways sharing the file, which this one's 429 does not count, or of a killed
  one), and none of them, nor what it was just answered, is lost;
- a row is found only by the tenant that stored it;
- a row that cannot be read back (a damaged or foreign file) is treated as absent;
- `get` answers whenever the file can be read: a last-used time that cannot be written
  (a full disk) is left as it was, the failure logged at most once a minute;
- a file SQLite finds damaged is set aside, never deleted (`cache.damaged_files`), and
  the call made again on a new archive: a put is kept, a get finds nothing; so is a file
  whose `responses` or `response_messages` table is another program's, when opened
  (`cache.sqlite_file`: QA189 F2, every stored turn was a 500);
- a row keeps its conversation's messages as ids into the tenant's messages, each kept
  once (`gateway.response_messages`), so a `previous_response_id` chain's rows grow with
  each turn's new messages; a row an older version wrote keeps them whole and is read so.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from cache.repeated_failures import RepeatedFailures
from cache.sqlite_file import SqliteFile, written_if_possible
from cache.sqlite_transaction import transaction
from gateway.response_messages import ADDED_COLUMN, NOT_JSON, ROW_DIGESTS, ResponseMessages, add_message_table
from gateway.response_store import OWNER_FIELD, StoredResponse
from gateway.store_thread import STORE_FAILURES

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    used_s REAL NOT NULL,
    response TEXT NOT NULL,
    messages TEXT NOT NULL,
    input_items TEXT NOT NULL,
    message_ids TEXT,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS responses_by_use ON responses (tenant, used_s);
"""
# not in the first version's rows (33830d5): they listed no input items
INPUT_ITEMS_COLUMN = ("responses", "input_items", "TEXT NOT NULL DEFAULT '[]'")
# An unfinished background response's row (`response_store.OWNER_FIELD` names the process
# running it): never trimmed while it runs (the run's later states replace only a row
# still there). A row whose JSON is damaged is no such row.
IS_UNFINISHED = (f"(CASE WHEN json_valid(response) THEN json_extract(response, '$.{OWNER_FIELD}') END) "
                 "IS NOT NULL")
# The row a put just stored as used now (not one a later put writes back with the time it
# was last used: it keeps its place in the order of use), which no trim deletes: what a
# tenant is answered is always found.
JUST_STORED = ("(r.rowid = last_insert_rowid() "
               "AND r.used_s >= (SELECT max(used_s) FROM responses WHERE tenant = r.tenant))")
# The tenant's least recently used rows beyond `capacity`, oldest first, unfinished ones and
# the row just stored skipped (they count toward `capacity`): only the excess is visited (a
# put into a full archive deletes one row), not every row kept.
TRIM = ("DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses AS r WHERE r.tenant = ? "
        f"AND NOT ({IS_UNFINISHED}) AND NOT {JUST_STORED} "
        "ORDER BY used_s, rowid LIMIT max(0, (SELECT count(*) FROM responses WHERE tenant = ?) - ?))")
log = logging.getLogger("stepahead.gateway")


class ResponseArchive:
    __slots__ = ("path", "capacity", "clock", "file", "_failures", "_messages")
    trim_sql = TRIM   # parameters: tenant, tenant, capacity

    def __init__(self, path: Path, capacity: int, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.capacity = capacity
        self.clock = clock
        self.file = SqliteFile(path, "the response archive", SCHEMA,
                                added_columns=(INPUT_ITEMS_COLUMN, ADDED_COLUMN),
                                migrate=add_message_table)
        self._failures = RepeatedFailures(log, expected=STORE_FAILURES)   # the archive thread only
        self._messages = ResponseMessages()   # the archive thread only

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    def close(self) -> None:
        self.file.close()

    def put(self, tenant: str, stored: StoredResponse, replacing: bool = False, used_s: float | None = None) -> bool:
        """Store the row; with `replacing`, only over a row still there (a background run's
        later states never bring back a response deleted meanwhile). Whether it was stored.
        `used_s`: when it was last used, if not now (a put made again later keeps its place)."""
        return self.file.surviving(
            lambda: self._replace(tenant, stored) if replacing else self._put(tenant, stored, used_s))

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return self.file.surviving(lambda: self._get(tenant, response_id))

    def delete(self, tenant: str, response_id: str) -> bool:
        return self.file.surviving(lambda: self._delete(tenant, response_id))

    def touch(self, tenant: str, response_id: str) -> bool:
        """Mark the row used now (it was read from memory), so the archive's order of use
        stays the memory's; False when there is no such row (deleted meanwhile). The mark
        waits for a file another gateway holds locked as a read's does (`written_if_possible`:
        QA143, a GET of a response from memory waited the whole 5 s)."""
        return self.file.surviving(lambda: self._touch_if_present(tenant, response_id))

    def _touch_if_present(self, tenant: str, response_id: str) -> bool:
        if self.db.execute("SELECT 1 FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id)).fetchone() \
                is None:
            return False
        written_if_possible(self.db, lambda: self._touch(tenant, response_id), self._failures,
                            "the response archive failed to mark a response used")
        return True

    def _put(self, tenant: str, stored: StoredResponse, used_s: float | None = None) -> bool:
        used_s = self.clock() if used_s is None else used_s
        with transaction(self.db, "BEGIN IMMEDIATE") as db:
            # a row stored over is deleted first (its messages released, `INSERT OR REPLACE`'s delete
            # fires no trigger), and the new one inserted last: `JUST_STORED` reads its rowid
            db.execute("DELETE FROM responses WHERE tenant = ? AND id = ?", (tenant, stored.response["id"]))
            db.execute("INSERT INTO responses (tenant, id, used_s, response, messages, input_items, message_ids) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (tenant, stored.response["id"], used_s, *self._columns(db, tenant, stored)))
            db.execute(self.trim_sql, (tenant, tenant, self.capacity))
        return True

    def _replace(self, tenant: str, stored: StoredResponse) -> bool:
        with transaction(self.db, "BEGIN IMMEDIATE") as db:
            if db.execute("SELECT 1 FROM responses WHERE tenant = ? AND id = ?",
                          (tenant, stored.response["id"])).fetchone() is None:
                return False   # deleted meanwhile: no messages kept for it either
            db.execute("UPDATE responses SET used_s = ?, response = ?, messages = ?, input_items = ?, message_ids = ? "
                       "WHERE tenant = ? AND id = ?",
                       (self.clock(), *self._columns(db, tenant, stored), tenant, stored.response["id"]))
        return True

    def _get(self, tenant: str, response_id: str) -> StoredResponse | None:
        row = self.db.execute(f"SELECT response, messages, input_items, message_ids, {ROW_DIGESTS} FROM responses AS r "
                              "WHERE tenant = ? AND id = ?", (tenant, response_id)).fetchone()
        if row is None:
            return None
        try:
            messages = (self._messages.shared(tenant, json.loads(row[1])) if row[3] is None
                        else self._messages.read(self.db, tenant, row[3], row[4]))
            if messages is None:
                return None
            stored = StoredResponse(json.loads(row[0]), messages, tuple(json.loads(row[2])))
        except (ValueError, TypeError):
            return None
        written_if_possible(self.db, lambda: self._touch(tenant, response_id), self._failures,
                            "the response archive failed to mark a response used")
        return stored

    def _columns(self, db: sqlite3.Connection, tenant: str, stored: StoredResponse) -> tuple[str, str, str, str]:
        """The row's `response`, `messages`, `input_items` and `message_ids` columns: JSON
        text (`messages` none: the messages are kept once, `message_ids` names them)."""
        return (json.dumps(stored.response, ensure_ascii=False), NOT_JSON,
                json.dumps(stored.input_items, ensure_ascii=False), self._messages.ids(db, tenant, stored.messages))

    def _touch(self, tenant: str, response_id: str) -> bool:
        return self.db.execute("UPDATE responses SET used_s = ? WHERE tenant = ? AND id = ?",
                               (self.clock(), tenant, response_id)).rowcount > 0

    def _delete(self, tenant: str, response_id: str) -> bool:
        cursor = self.db.execute("DELETE FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id))
        return cursor.rowcount > 0

