"""The conversation archive on a full disk: a read answers though its last-used time cannot
be written; writes fail as before; the failure is logged at most once a minute."""
import logging
import sqlite3

import pytest

from gateway.conversation_archive import Conversation, ConversationArchive, Missing
from gateway.list_page import ListPage

WRITES = ("INSERT", "UPDATE", "DELETE", "BEGIN", "REPLACE")


class FullDisk:
    """A connection whose writes fail as SQLite's do on a full disk; reads pass."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, args=()):
        if sql.lstrip().split(None, 1)[0].upper() in WRITES:
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def _item(text: str) -> dict:
    return {"type": "message", "id": f"msg_{text}", "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": text}]}


def _full(tmp_path) -> ConversationArchive:
    archive = ConversationArchive(tmp_path / "conversations.sqlite3", capacity=8)
    archive.create("a", Conversation("c1", 100, {"k": "v"}), [_item("0"), _item("1")])
    archive.file._db = FullDisk(archive.db)   # the disk fills up
    return archive


def test_reads_answer_while_the_disk_is_full(tmp_path):
    archive = _full(tmp_path)
    assert [item["id"] for item in archive.items("a", "c1")] == ["msg_0", "msg_1"]
    assert archive.get("a", "c1").metadata == {"k": "v"}
    items, more = archive.page("a", "c1", ListPage(limit=1, order="asc"))
    assert [item["id"] for item in items] == ["msg_0"] and more
    assert archive.get_item("a", "c1", "msg_1")["id"] == "msg_1"
    with pytest.raises(Missing):   # what is not there is still not there
        archive.items("a", "nope")
    with pytest.raises(Missing):
        archive.get_item("a", "c1", "msg_nope")


def test_writes_still_fail_while_the_disk_is_full(tmp_path):
    archive = _full(tmp_path)
    with pytest.raises(sqlite3.OperationalError):
        archive.add_items("a", "c1", [_item("2")])
    with pytest.raises(sqlite3.OperationalError):
        archive.set_metadata("a", "c1", {})


def test_the_failed_last_used_time_is_logged_at_most_once_a_minute(tmp_path, caplog):
    archive = _full(tmp_path)
    with caplog.at_level(logging.ERROR, logger="stepahead.gateway"):
        for _ in range(5):
            archive.items("a", "c1")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "database or disk is full" in lines[0]
    assert "Traceback" not in caplog.text


def test_the_last_used_time_is_written_again_once_there_is_room(tmp_path):
    ticks = iter(range(100))
    archive = ConversationArchive(tmp_path / "conversations.sqlite3", capacity=1, clock=lambda: float(next(ticks)))
    archive.create("a", Conversation("c1", 1, {}), [_item("0")])
    real = archive.db
    archive.file._db = FullDisk(real)
    archive.items("a", "c1")
    archive.file._db = real   # room again
    archive.items("a", "c1")
    (used_s,) = real.execute("SELECT used_s FROM conversations WHERE id = 'c1'").fetchone()
    assert used_s > 1.0
