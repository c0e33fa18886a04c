"""Conversations (the Conversations API) in SQLite: each tenant's conversations and their
items, in order, across restarts.

Only the conversation store's one thread calls this class, never the event loop.
Invariants:
- a conversation and its items are found only by the tenant that made them (another
  tenant's ids read as unknown);
- a conversation's items keep the order they were added in (`seq`, rising); item ids are
  unique within a conversation: an added item whose id is taken gets a new one;
- a deleted item leaves its cursor (`ITEM_CURSORS`, gateway/gone_cursors.py) in the
  transaction that deletes it: a page `after` it starts where it stood, for GONE_KEPT_S
  (QA180: deleting while paging), while an id the conversation never had is `Missing`; a
  new item is numbered past the cursors too; a deleted conversation takes its cursors;
- each tenant keeps at most `capacity` conversations; past it, the least recently used
  (made, read or added to) leave first, with their items, but never one `held` by a
  response running on it (`conversation_locks`: its turn's items would go nowhere, QA154):
  when only held ones could leave, the new conversation is not made (`Full`);
- each tenant's item bytes are counted in the file (gateway/conversation_bytes.py); an add
  given a `cap` that would take its tenant past it (`OverCap`) keeps nothing and evicts
  nothing (the check follows the evictions, in their transaction);
- a file SQLite finds damaged is set aside, never deleted (`cache.damaged_files`), and
  the call made again on a new, empty file; `path` None keeps everything in memory;
- a read (`get`, `items`, `page`, `get_item`) answers whenever the file can be read: the
  last-used time it writes is left as it was when that write fails (a full disk, a
  read-only file), the failure logged at most once a minute.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cache.repeated_failures import RepeatedFailures
from cache.sqlite_file import SqliteFile, written_if_possible
from cache.sqlite_transaction import transaction
from gateway.conversation_bytes import add_byte_count, check_room, held_bytes, item_bytes
from gateway.conversation_items import new_item_id
from gateway.gone_cursors import GoneCursors
from gateway.list_page import ListPage
from gateway.store_thread import STORE_FAILURES

# where a conversation's deleted items stood (a table an archive made before gets when opened)
ITEM_CURSORS = GoneCursors("conversation_item_cursors", "conversation_items", ("tenant", "conversation"))
SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    used_s REAL NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS conversations_by_use ON conversations (tenant, used_s);
CREATE TABLE IF NOT EXISTS conversation_items (
    tenant TEXT NOT NULL,
    conversation TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (tenant, conversation, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id ON conversation_items (tenant, conversation, id);
""" + ITEM_CURSORS.schema
log = logging.getLogger("stepahead.gateway")
# The tenant's conversations, least recently used first (as many as the LIMIT says).
LEAST_USED = "SELECT id FROM conversations WHERE tenant = ? ORDER BY used_s, rowid LIMIT ?"


class Missing(LookupError):
    """The conversation (`what` "conversation") or item ("item") a call names is not there."""

    def __init__(self, what: str, name: str) -> None:
        super().__init__(what, name)
        self.what, self.name = what, name


class Full(Exception):
    """A new conversation would take the tenant past `capacity`, and every conversation
    that could leave to make room has a response running on it (`held`)."""

    def __init__(self, capacity: int, held: int) -> None:
        super().__init__(capacity, held)
        self.capacity, self.held = capacity, held


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]

    def as_object(self) -> dict:
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata}


class ConversationArchive:
    __slots__ = ("path", "capacity", "clock", "file", "_failures")

    def __init__(self, path: Path | None, capacity: int, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.capacity = capacity
        self.clock = clock
        self.file = SqliteFile(path, "the conversation archive", SCHEMA, migrate=add_byte_count)
        self._failures = RepeatedFailures(log, expected=STORE_FAILURES)   # the store's one thread only

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    def close(self) -> None:
        self.file.close()

    def _surviving(self, operation: Callable[[], object]):
        return self.file.surviving(operation)

    # --- conversations -------------------------------------------------------------

    def create(self, tenant: str, conversation: Conversation, items: list[dict],
               held: frozenset[str] = frozenset(), cap: int | None = None) -> list[dict]:
        """Keep a new conversation with its first items, the tenant's least recently used
        ones that are not `held` (ids with a response running on them) leaving to keep it
        within `capacity`; returns the items as kept. `Full` (nothing made) when only held
        ones could leave; `OverCap` (nothing made, nothing left) when its items would take
        the tenant's past `cap` bytes (None: no cap)."""
        def create() -> list[dict]:
            with transaction(self.db, "BEGIN IMMEDIATE") as db:
                for leaving in self._leaving_for_one_more(db, tenant, held):
                    self._delete(db, tenant, leaving)
                db.execute("INSERT INTO conversations (tenant, id, created_at, metadata, used_s) VALUES (?, ?, ?, ?, ?)",
                           (tenant, conversation.id, conversation.created_at, json.dumps(conversation.metadata),
                            self.clock()))
                return self._insert_items(db, tenant, conversation.id, items, cap)
        return self._surviving(create)

    def _leaving_for_one_more(self, db: sqlite3.Connection, tenant: str, held: frozenset[str]) -> list[str]:
        """The tenant's least recently used conversations that are not `held`, as many as
        must leave for one more to fit in `capacity`; `Full` when there are not enough."""
        (count,) = db.execute("SELECT count(*) FROM conversations WHERE tenant = ?", (tenant,)).fetchone()
        excess = count + 1 - self.capacity
        if excess <= 0:
            return []
        # the held ones are few: reading past as many of them finds enough that are not
        leaving = [conversation_id for (conversation_id,) in db.execute(LEAST_USED, (tenant, excess + len(held)))
                   if conversation_id not in held][:excess]
        if len(leaving) < excess:
            raise Full(self.capacity, len(held))
        return leaving

    def get(self, tenant: str, conversation_id: str) -> Conversation:
        return self._surviving(lambda: self._read(tenant, conversation_id))

    def set_metadata(self, tenant: str, conversation_id: str, metadata: dict[str, str]) -> Conversation:
        def set_metadata() -> Conversation:
            with transaction(self.db, "BEGIN IMMEDIATE") as db:
                self._touch(db, tenant, conversation_id)
                db.execute("UPDATE conversations SET metadata = ? WHERE tenant = ? AND id = ?",
                           (json.dumps(metadata), tenant, conversation_id))
                return self._touch(db, tenant, conversation_id)
        return self._surviving(set_metadata)

    def delete(self, tenant: str, conversation_id: str) -> None:
        def delete() -> None:
            with transaction(self.db, "BEGIN IMMEDIATE") as db:
                if not self._delete(db, tenant, conversation_id):
                    raise Missing("conversation", conversation_id)
        self._surviving(delete)

    # --- items ---------------------------------------------------------------------

    def add_items(self, tenant: str, conversation_id: str, items: list[dict], cap: int | None = None) -> list[dict]:
        """Append `items`; returns them as kept (an id already taken replaced). `OverCap`
        (nothing kept) when they would take the tenant's items past `cap` bytes."""
        def add() -> list[dict]:
            with transaction(self.db, "BEGIN IMMEDIATE") as db:
                self._touch(db, tenant, conversation_id)
                return self._insert_items(db, tenant, conversation_id, items, cap)
        return self._surviving(add)

    def check_room(self, tenant: str, items: list[dict], cap: int | None) -> None:
        """`OverCap` when `items` (as an add would keep them) would take the tenant's items
        past `cap` bytes now; nothing written."""
        texts = _as_kept(items)
        self._surviving(lambda: check_room(self.db, tenant, item_bytes(texts), cap))

    def held_bytes(self, tenant: str) -> int:
        """The bytes the tenant's items hold (gateway/conversation_bytes.py)."""
        return self._surviving(lambda: held_bytes(self.db, tenant))

    def items(self, tenant: str, conversation_id: str) -> list[dict]:
        """Every item, oldest first."""
        def items() -> list[dict]:
            self._read(tenant, conversation_id)
            rows = self.db.execute("SELECT item FROM conversation_items WHERE tenant = ? AND conversation = ? "
                                   "ORDER BY seq", (tenant, conversation_id))
            return [json.loads(item) for (item,) in rows]
        return self._surviving(items)

    def page(self, tenant: str, conversation_id: str, page: ListPage) -> tuple[list[dict], bool]:
        """(the items of one page of the list, whether more follow it)."""
        def list_page() -> tuple[list[dict], bool]:
            db = self.db
            self._read(tenant, conversation_id)
            where, args = "tenant = ? AND conversation = ?", [tenant, conversation_id]
            if page.after is not None:
                where += f" AND seq {'>' if page.order == 'asc' else '<'} ?"
                args.append(self._seq_of(db, tenant, conversation_id, page.after))
            rows = db.execute(f"SELECT item FROM conversation_items WHERE {where} ORDER BY seq "
                              f"{'ASC' if page.order == 'asc' else 'DESC'} LIMIT ?",
                              (*args, page.limit + 1)).fetchall()
            return [json.loads(item) for (item,) in rows[:page.limit]], len(rows) > page.limit
        return self._surviving(list_page)

    def get_item(self, tenant: str, conversation_id: str, item_id: str) -> dict:
        def get_item() -> dict:
            self._read(tenant, conversation_id)
            row = self.db.execute("SELECT item FROM conversation_items WHERE tenant = ? AND conversation = ? "
                                  "AND id = ?", (tenant, conversation_id, item_id)).fetchone()
            if row is None:
                raise Missing("item", item_id)
            return json.loads(row[0])
        return self._surviving(get_item)

    def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> Conversation:
        def delete_item() -> Conversation:
            with transaction(self.db, "BEGIN IMMEDIATE") as db:
                conversation = self._touch(db, tenant, conversation_id)
                ITEM_CURSORS.keep(db, (tenant, conversation_id), item_id, self.clock())
                if db.execute("DELETE FROM conversation_items WHERE tenant = ? AND conversation = ? AND id = ?",
                              (tenant, conversation_id, item_id)).rowcount == 0:
                    raise Missing("item", item_id)
                ITEM_CURSORS.forget_old(db, self.clock())
                return conversation
        return self._surviving(delete_item)

    # --- within a call --------------------------------------------------------------

    def _touch(self, db: sqlite3.Connection, tenant: str, conversation_id: str) -> Conversation:
        """The conversation, marked as used now; Missing when this tenant has none by that id."""
        conversation = self._find(db, tenant, conversation_id)
        self._mark_used(db, tenant, conversation_id)
        return conversation

    def _read(self, tenant: str, conversation_id: str) -> Conversation:
        """`_touch` for a read, outside a transaction: a last-used time that cannot be
        written (a full disk) is logged and left as it was, and the read goes on."""
        db = self.db
        conversation = self._find(db, tenant, conversation_id)
        written_if_possible(db, lambda: self._mark_used(db, tenant, conversation_id), self._failures,
                            "the conversation archive failed to mark a conversation used")
        return conversation

    @staticmethod
    def _find(db: sqlite3.Connection, tenant: str, conversation_id: str) -> Conversation:
        row = db.execute("SELECT created_at, metadata FROM conversations WHERE tenant = ? AND id = ?",
                         (tenant, conversation_id)).fetchone()
        if row is None:
            raise Missing("conversation", conversation_id)
        return Conversation(conversation_id, row[0], json.loads(row[1]))

    def _mark_used(self, db: sqlite3.Connection, tenant: str, conversation_id: str) -> None:
        db.execute("UPDATE conversations SET used_s = ? WHERE tenant = ? AND id = ?",
                   (self.clock(), tenant, conversation_id))

    @staticmethod
    def _seq_of(db: sqlite3.Connection, tenant: str, conversation_id: str, item_id: str) -> int:
        """Where `item_id` stands in the conversation: its item's `seq`, else its cursor's
        while kept (deleted since); Missing for an id the conversation never had."""
        row = db.execute("SELECT seq FROM conversation_items WHERE tenant = ? AND conversation = ? AND id = ?",
                         (tenant, conversation_id, item_id)).fetchone()
        seq = row[0] if row is not None else ITEM_CURSORS.seq_of(db, (tenant, conversation_id), item_id)
        if seq is None:
            raise Missing("item", item_id)
        return seq

    @staticmethod
    def _insert_items(db: sqlite3.Connection, tenant: str, conversation_id: str, items: list[dict],
                      cap: int | None) -> list[dict]:
        """`items` appended, each id taken (by an item kept or one before it here)
        replaced, once `check_room` passed them: all or (`OverCap`) none."""
        (last,) = db.execute(f"SELECT {ITEM_CURSORS.last_seq(without=-1)}",   # past deleted items too
                             (tenant, conversation_id, tenant, conversation_id)).fetchone()
        kept, ids = [], set()
        for item in items:
            if item["id"] in ids or db.execute("SELECT 1 FROM conversation_items WHERE tenant = ? AND "
                                               "conversation = ? AND id = ?",
                                               (tenant, conversation_id, item["id"])).fetchone() is not None:
                item = {**item, "id": new_item_id(item.get("type", "message"))}
            ids.add(item["id"])
            kept.append(item)
        texts = _as_kept(kept)
        check_room(db, tenant, item_bytes(texts), cap)
        db.executemany("INSERT INTO conversation_items (tenant, conversation, seq, id, item) VALUES (?, ?, ?, ?, ?)",
                       [(tenant, conversation_id, seq, item["id"], text)
                        for seq, (item, text) in enumerate(zip(kept, texts), start=last + 1)])
        return kept

    @staticmethod
    def _delete(db: sqlite3.Connection, tenant: str, conversation_id: str) -> bool:
        db.execute("DELETE FROM conversation_items WHERE tenant = ? AND conversation = ?", (tenant, conversation_id))
        ITEM_CURSORS.forget_list(db, (tenant, conversation_id))
        return db.execute("DELETE FROM conversations WHERE tenant = ? AND id = ?",
                          (tenant, conversation_id)).rowcount > 0


def _as_kept(items: list[dict]) -> list[str]:
    """The text each item is kept as (its `item` column), whose UTF-8 bytes it counts for."""
    return [json.dumps(item, ensure_ascii=False) for item in items]
