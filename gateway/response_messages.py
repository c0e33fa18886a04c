"""The chat messages of stored responses, kept once per tenant (QA185 F2: each row kept its
whole conversation, so a `previous_response_id` chain of N turns took O(N²) bytes).

A stored response's conversation is its earlier turns' messages, then its own: along a
chain each row repeats all of the previous row's. So the response archive keeps each
message once, in `response_messages` (a row per tenant and message, found by the SHA-256
of its JSON), and a response's row keeps only their ids (`message_ids`, a JSON array in
order): a chain's file grows with each turn's new messages, not its whole conversation.

Invariants:
- a message row belongs to one tenant: its `(tenant, digest)` is unique, and a response
  row only ever counts or reads messages of its own tenant, so two tenants storing the
  same message each keep their own copy and neither can learn that the other stored it;
- `refs` is the number of response rows whose `message_ids` name the message, kept by
  triggers on `responses` (`TRIGGERS`) in the transaction that inserts, replaces or
  deletes the row (a delete, a trim, a put over a row), whichever gateway makes it (an
  older version sharing the file too: the triggers are part of the file); a message no
  row names any more is deleted with it, so a trimmed or deleted response frees the
  messages no other row of its tenant uses;
- a row is read with its messages' digests in one statement, and the messages then found
  by digest (`read`): another gateway's delete in between makes the response absent, never
  answered with another message (an id may be reused, a digest names one content);
- messages read back are shared, per tenant and digest, with those read earlier that are
  still held (`StoredMessage`, weakly): memory holding a chain read from disk grows with
  its messages, not with each row's whole conversation;
- a row made before `message_ids` existed (NULL) keeps its whole conversation in its
  `messages` column and is read from there, its messages shared as above. A row made
  here has `messages` = '' (not JSON), which an older version reads as damaged, so it
  treats the response as absent (a 404) rather than continue it with a wrong history.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import weakref
from collections.abc import Iterable

from cache.sqlite_transaction import transaction

# made after the archive's schema (its `message_ids` column added to an older file first)
_VALID = "CASE WHEN json_valid({ids}) THEN {ids} END"   # a damaged list names nothing (and blocks no delete)
_IDS = "SELECT value FROM json_each(" + _VALID + ")"


def _counted(sign: str, tenant: str, ids: str) -> str:
    """The statements that count the messages a row's `ids` names once more (+) or once
    less (-), those then named by no row deleted."""
    # by id (the rowid) first: `+tenant` keeps SQLite from walking the tenant's every message
    # instead (QA189 F1: a put or delete cost O(the tenant's messages))
    named = f"id IN ({_IDS.format(ids=ids)}) AND +tenant = {tenant}"
    freed = f" DELETE FROM response_messages WHERE {named} AND refs <= 0;" if sign == "-" else ""
    return f"UPDATE response_messages SET refs = refs {sign} 1 WHERE {named};{freed}"


_ADDED = _counted("+", "NEW.tenant", "NEW.message_ids")
_RELEASED = _counted("-", "OLD.tenant", "OLD.message_ids")
# an older version's `INSERT OR REPLACE` over a row deletes it firing no delete trigger: its messages
# are released before (a plain insert over a row fails, undoing this with it; this one deletes first)
_STORED_OVER = _counted("-", "NEW.tenant",
                        "(SELECT message_ids FROM responses WHERE tenant = NEW.tenant AND id = NEW.id)")
TABLE = """
CREATE TABLE IF NOT EXISTS response_messages (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    digest TEXT NOT NULL,
    refs INTEGER NOT NULL,
    message TEXT NOT NULL,
    UNIQUE (tenant, digest)
);
"""
# name -> its CREATE statement, as sqlite_master keeps it
TRIGGERS = {
    "response_messages_stored_over": f"CREATE TRIGGER response_messages_stored_over BEFORE INSERT ON responses "
                                     f"BEGIN {_STORED_OVER} END",
    "response_messages_added": f"CREATE TRIGGER response_messages_added AFTER INSERT ON responses BEGIN {_ADDED} END",
    "response_messages_released": f"CREATE TRIGGER response_messages_released AFTER DELETE ON responses "
                                  f"BEGIN {_RELEASED} END",
    "response_messages_replaced": f"CREATE TRIGGER response_messages_replaced AFTER UPDATE OF message_ids ON "
                                  f"responses BEGIN {_ADDED} {_RELEASED} END",
}
# a column of a `responses` row read as `r`: its messages' digests, a JSON object by id (one statement
# reads both: another gateway's delete in between never pairs the row with others' ids)
# (driven by the row's ids, each found by rowid: not a walk of the tenant's every message, QA189 F1)
ROW_DIGESTS = ("(SELECT json_group_object(m.id, m.digest) FROM json_each(" + _VALID.format(ids="r.message_ids")
               + ") AS j CROSS JOIN response_messages AS m ON m.id = j.value AND +m.tenant = r.tenant)")
ADDED_COLUMN = ("responses", "message_ids", "TEXT")   # NULL: a row that keeps its whole conversation
NOT_JSON = ""   # a new row's `messages` column: an older version finds it damaged, the response absent


def add_message_table(db: sqlite3.Connection) -> None:
    """The messages' table and the triggers that count their references, made where the
    file lacks them or has another version's (run at each opening, after `ADDED_COLUMN`;
    one transaction, so a gateway sharing the file never writes between a trigger's drop
    and its new version)."""
    db.executescript(TABLE)
    kept = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN "
                           "(SELECT value FROM json_each(?))", (json.dumps(list(TRIGGERS)),)))
    if all(kept.get(name) == sql for name, sql in TRIGGERS.items()):
        return
    with transaction(db, "BEGIN IMMEDIATE"):
        for name, sql in TRIGGERS.items():
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
            db.execute(sql)


class StoredMessage(dict):
    """A message read back from the archive: a plain dict, but one `ResponseMessages` can
    hold weakly, so each is parsed and held once however many responses include it."""

    __slots__ = ("__weakref__",)


def _text(message: dict) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ResponseMessages:
    """The archive thread's side of `response_messages`: ids for a row to keep, messages
    for a row read back, and the messages read back still held (weakly)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[tuple[str, str], StoredMessage] = weakref.WeakValueDictionary()

    def ids(self, db: sqlite3.Connection, tenant: str, messages: Iterable[dict]) -> str:
        """The `message_ids` column of a row keeping `messages`, in order: each the id of
        the tenant's message with its digest, inserted (no references yet: the row's
        insert or update counts them) when it has none. Call it in the write transaction
        that then writes the row."""
        texts = [_text(message) for message in messages]
        digests = [_digest(text) for text in texts]
        found = dict(db.execute("SELECT digest, id FROM response_messages WHERE tenant = ? AND digest IN "
                                "(SELECT value FROM json_each(?))", (tenant, json.dumps(digests))))
        for text, digest in zip(texts, digests):
            if digest not in found:
                found[digest] = db.execute("INSERT INTO response_messages (tenant, digest, refs, message) "
                                           "VALUES (?, ?, 0, ?)", (tenant, digest, text)).lastrowid
        return json.dumps([found[digest] for digest in digests])

    def read(self, db: sqlite3.Connection, tenant: str, message_ids: str,
             digests: str) -> tuple[StoredMessage, ...] | None:
        """The messages a row's `message_ids` names, in order, from its `ROW_DIGESTS` read
        with it; None when one is missing (a damaged file, or the row deleted since it was
        read: found by digest, a message is never another's)."""
        ids = json.loads(message_ids)
        by_id = {int(key): digest for key, digest in json.loads(digests).items()}
        if not isinstance(ids, list) or any(key not in by_id for key in ids):
            return None
        held = {digest: self._held.get((tenant, digest)) for digest in by_id.values()}
        missing = [digest for digest, message in held.items() if message is None]
        if missing:
            for digest, text in db.execute("SELECT digest, message FROM response_messages WHERE tenant = ? AND "
                                           "digest IN (SELECT value FROM json_each(?))", (tenant, json.dumps(missing))):
                held[digest] = self._shared(tenant, digest, json.loads(text))
        messages = tuple(held[by_id[key]] for key in ids)
        return None if any(message is None for message in messages) else messages

    def shared(self, tenant: str, messages: Iterable[dict]) -> tuple[StoredMessage, ...]:
        """`messages` (a row's whole conversation, as an older version kept it), each as the
        one already held when there is one."""
        return tuple(self._shared(tenant, _digest(_text(message)), message) for message in messages)

    def _shared(self, tenant: str, digest: str, message: object) -> StoredMessage:
        if not isinstance(message, dict):
            raise ValueError("a stored message is not a JSON object")
        held = self._held.get((tenant, digest))
        if held is None:
            held = self._held[(tenant, digest)] = StoredMessage(message)
        return held
