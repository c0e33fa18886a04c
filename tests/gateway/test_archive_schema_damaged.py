"""A responses' or conversations' file whose schema page SQLite cannot read is set aside
when opened, as any other damaged file (FI104: the start failed with "database disk
image is malformed (set [server] responses_db ... to a place it can write)"): renamed
`<name>.damaged-<UTC time>` with one warning line, and a new, empty one started in its
place; `stepahead config check` says the start will do so, and leaves the file as it is
(tests/gateway/test_config_check_damaged.py)."""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.config import key_digest, load_config
from gateway.conversation_archive import Conversation, ConversationArchive
from gateway.response_archive import ResponseArchive
from gateway.response_store import StoredResponse
from gateway.store_places import check_store_places
from gateway.unrecorded_files import SweptIndex

PORT = 23720   # this test file's port (the brief's range); nothing listens


def spoil_schema(path: Path) -> bytes:
    """Overwrite the schema's page (page 1, after the 100-byte header, which stays whole:
    SQLite still reads the file as a database) of the closed database at `path`; its bytes
    after."""
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
        page_size, = db.execute("PRAGMA page_size").fetchone()
    db.close()
    with open(path, "r+b") as file:
        file.seek(100)
        file.write(b"\xff" * (page_size - 100))
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):   # what the start met
        sqlite3.connect(path).execute("SELECT * FROM sqlite_master").fetchall()
    return path.read_bytes()


def _response(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "object": "response"}, (), ())


def _kept_response(archive: ResponseArchive, response_id: str) -> bool:
    archive.put("a", _response(response_id))
    return archive.get("a", response_id) is not None


def _kept_conversation(archive: ConversationArchive, conversation_id: str) -> bool:
    archive.create("a", Conversation(conversation_id, 1, {}), [])
    return archive.get("a", conversation_id).id == conversation_id


ARCHIVES = {
    "responses": (ResponseArchive, "the response archive", _kept_response),
    "conversations": (ConversationArchive, "the conversation archive", _kept_conversation),
}


def _set_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.damaged-*[0-9]Z"))


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_an_archive_whose_schema_is_damaged_is_set_aside_when_opened_and_a_new_one_started(tmp_path, caplog, name):
    make, what, kept = ARCHIVES[name]
    path = tmp_path / f"{name}.sqlite3"
    archive = make(path, 10)
    assert kept(archive, "old")
    archive.close()
    spoiled = spoil_schema(path)
    caplog.set_level(logging.WARNING, "stepahead")
    archive = make(path, 10)
    archive.db   # noqa: B018  (opening it: raised DatabaseError)
    [aside] = _set_aside(path)
    assert aside.read_bytes() == spoiled   # moved as it was, never written
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage() == (f"stepahead: warning: {what} {path} is damaged (database disk image is "
                                   f"malformed); moved it to {aside} and started afresh")
    assert kept(archive, "new")   # the new file works
    archive.close()
    again = make(path, 10)
    assert kept(again, "again") and _set_aside(path) == [aside]   # the new one is healthy: opened as it is
    again.close()


def test_the_start_sets_a_schema_damaged_responses_and_conversations_file_aside_in_one_line_each(tmp_path, caplog):
    data = tmp_path / "data"
    config = tmp_path / "gw.toml"
    config.write_text(f'[server]\nport = {PORT}\nresponses_db = "{data}/responses.sqlite3"\n'
                      '[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                      f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n')
    loaded = load_config(str(config))
    check_store_places(loaded)   # makes both archives
    paths = [data / "responses.sqlite3", data / "conversations.sqlite3"]
    spoiled = [spoil_schema(path) for path in paths]
    caplog.set_level(logging.WARNING, "stepahead")
    check_store_places(loaded)   # raised StartFailed: "... database disk image is malformed (set ..."
    asides = [_set_aside(path) for path in paths]
    assert [len(found) for found in asides] == [1, 1]
    assert [found[0].read_bytes() for found in asides] == spoiled
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == [f"stepahead: warning: the {what} archive {path} is damaged (database disk image is malformed); "
                     f"moved it to {found[0]} and started afresh"
                     for what, path, found in zip(("response", "conversation"), paths, asides)]
    assert all("\n" not in line for line in lines)
    caplog.clear()
    check_store_places(loaded)   # the new files open as they are
    assert not caplog.records and [len(_set_aside(path)) for path in paths] == [1, 1]
    assert _kept_response(ResponseArchive(paths[0], 10), "r")
    assert _kept_conversation(ConversationArchive(paths[1], 10), "c")


def test_an_index_whose_set_aside_reads_it_again_opens_the_new_file_once(tmp_path):
    """A `SweptIndex` (the Files and Batch indexes) reads the new index while setting the
    damaged one aside (which files it still records): the opening that met the damage
    then goes on with that connection, not a second one."""
    path = tmp_path / "files.sqlite3"
    schema = "CREATE TABLE IF NOT EXISTS files (id TEXT);"
    opened = []

    def after_set_aside() -> None:
        assert index.rows("SELECT count(*) FROM files") == [(0,)]
        opened.append(index.db)

    index = SweptIndex(path, "the Files API's index", schema, after_set_aside=after_set_aside)
    index.change("INSERT INTO files VALUES ('file-1')")
    index.close()
    spoil_schema(path)
    assert index.db is opened[0] and len(_set_aside(path)) == 1
    assert index.rows("SELECT id FROM files") == []
    index.close()
