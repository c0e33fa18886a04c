"""Each tenant's cap on the bytes its conversations' items hold (`[server]
conversation_bytes_per_tenant`), as `file_bytes_per_tenant` caps its files (QA185 F1: one
tenant's item adds filled the disk every tenant's stores share).

Invariants:
- what counts is each kept item's JSON, in UTF-8 bytes (its `item` column), over all of
  the tenant's conversations: one tenant's items never use another tenant's room;
- the count lives in the archive's own file (`conversation_bytes`, a row per tenant),
  kept by triggers on `conversation_items`: every item inserted adds its bytes and every
  one deleted (an item deleted, its conversation deleted or evicted by
  `conversations_per_tenant`) takes them off, in the transaction that makes the change,
  whichever gateway makes it (an older one sharing the file too: the triggers are part of
  the file). So it survives a restart and never drifts from the items;
- a file made before the count has it made from its items once, in the one transaction
  that adds the table and its triggers (`add_byte_count`, run at each opening: a file
  that has the table is left alone);
- an add (`check_room`: in the write transaction that would keep them, before anything
  is written) that would take its tenant past the cap is refused (`OverCap`; the store
  answers it with `conversation_storage_full`, a 400 in OpenAI's shape): nothing of it is
  kept. An add of no bytes is never refused, even past a cap lowered since.
"""
from __future__ import annotations

import sqlite3

from cache.sqlite_transaction import transaction
from gateway.errors import ApiError

DEFAULT_CONVERSATION_BYTES_PER_TENANT = 1024 ** 3
STORAGE_FULL_CODE = "conversation_storage_limit_exceeded"
BYTES_TABLE = "conversation_bytes"
# the table and its triggers, made together by `add_byte_count`
BYTE_COUNT = (
    f"CREATE TABLE {BYTES_TABLE} (tenant TEXT PRIMARY KEY, bytes INTEGER NOT NULL)",
    f"CREATE TRIGGER conversation_item_bytes_added AFTER INSERT ON conversation_items BEGIN "
    f"INSERT INTO {BYTES_TABLE} (tenant, bytes) VALUES (NEW.tenant, length(CAST(NEW.item AS BLOB))) "
    f"ON CONFLICT (tenant) DO UPDATE SET bytes = bytes + excluded.bytes; END",
    f"CREATE TRIGGER conversation_item_bytes_removed AFTER DELETE ON conversation_items BEGIN "
    f"UPDATE {BYTES_TABLE} SET bytes = bytes - length(CAST(OLD.item AS BLOB)) WHERE tenant = OLD.tenant; END",
    f"INSERT INTO {BYTES_TABLE} (tenant, bytes) "
    f"SELECT tenant, SUM(length(CAST(item AS BLOB))) FROM conversation_items GROUP BY tenant",
)


class OverCap(Exception):
    """Items of `num_bytes` would take a tenant whose conversations hold `held` bytes past
    its `cap`."""

    def __init__(self, cap: int, held: int, num_bytes: int) -> None:
        super().__init__(cap, held, num_bytes)
        self.cap, self.held, self.num_bytes = cap, held, num_bytes


def conversation_storage_full(refused: OverCap, param: str = "items") -> ApiError:
    """The 400 of an add `OverCap` refused, worded as `file_storage_full`'s."""
    return ApiError(400, f"You have exceeded your conversation storage quota: a tenant may keep {refused.cap} bytes "
                    "of conversation items (`[server] conversation_bytes_per_tenant`); yours hold "
                    f"{refused.held} bytes, and these items ({refused.num_bytes} bytes) would bring them to "
                    f"{refused.held + refused.num_bytes}. Delete conversations or items you no longer need "
                    "(DELETE /v1/conversations/{conversation_id} or /v1/conversations/{conversation_id}/items/"
                    "{item_id}) and add them again.", "invalid_request_error", STORAGE_FULL_CODE, param)


def item_bytes(texts: list[str]) -> int:
    """The bytes `texts` (items' JSON, as kept) count for: their UTF-8 length, as SQLite's
    `length(CAST(item AS BLOB))` reads it."""
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


def held_bytes(db: sqlite3.Connection, tenant: str) -> int:
    """The bytes of the tenant's items, as counted."""
    row = db.execute(f"SELECT bytes FROM {BYTES_TABLE} WHERE tenant = ?", (tenant,)).fetchone()
    return 0 if row is None else row[0]


def check_room(db: sqlite3.Connection, tenant: str, num_bytes: int, cap: int | None) -> None:
    """`OverCap` when `num_bytes` more would take the tenant past `cap` (None: no cap).
    Call it in the write transaction that then keeps them."""
    if cap is None or num_bytes == 0:
        return
    held = held_bytes(db, tenant)
    if held + num_bytes > cap:
        raise OverCap(cap, held, num_bytes)


def _has_count(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (BYTES_TABLE,)).fetchone() is not None


def add_byte_count(db: sqlite3.Connection) -> None:
    """Give a file without the count its table and triggers, counted from its items, in
    one transaction (another gateway opening it meanwhile finds it made); a file that has
    it is left alone. Run after the archive's schema, at each opening."""
    if _has_count(db):
        return
    with transaction(db, "BEGIN IMMEDIATE"):
        if _has_count(db):
            return
        for statement in BYTE_COUNT:
            db.execute(statement)
