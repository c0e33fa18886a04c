"""A responses' or conversations' file holding tables of our names that something else
made (QA189 F2: `CREATE TABLE response_messages (x TEXT)` in the responses file made every
stored turn a 500 and each DELETE a 404) is set aside when opened, never deleted, with one
warning line, and a new one serves; a file an older version of ours wrote is kept."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from gateway.conversation_archive import Conversation, ConversationArchive
from gateway.response_archive import ResponseArchive
from gateway.response_store import StoredResponse
from tests.cache.test_foreign_tables import _made as _foreign, _set_aside   # (the same file steps)
from tests.gateway.conftest import KEYS

MESSAGES = ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})


def _warned(caplog, what: str, path: Path, aside: Path) -> str:
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert message.startswith(f"stepahead: warning: {what} {path} holds tables that are not ours (")
    assert message.endswith(f"); moved it to {aside} and started afresh")
    return message


@pytest.mark.parametrize("table", ["response_messages", "responses"])
def test_a_response_archive_with_anothers_table_is_set_aside_and_a_new_one_keeps_each_turn(tmp_path, caplog, table):
    path = tmp_path / "responses.sqlite3"
    theirs = _foreign(path, f"CREATE TABLE {table} (x TEXT); INSERT INTO {table} VALUES ('theirs');")
    caplog.set_level(logging.WARNING, "stepahead")
    archive = ResponseArchive(path, 10)
    stored = StoredResponse({"id": "resp_1", "object": "response"}, MESSAGES, ({"type": "message"},))
    assert archive.put("a", stored)
    assert archive.get("a", "resp_1") == stored
    assert archive.delete("a", "resp_1") and archive.get("a", "resp_1") is None
    [aside] = _set_aside(path)
    assert aside.read_bytes() == theirs
    assert f"({table} lacks " in _warned(caplog, "the response archive", path, aside)


@pytest.mark.parametrize("table", ["conversations", "conversation_items"])
def test_a_conversation_archive_with_anothers_table_is_set_aside_too(tmp_path, caplog, table):
    path = tmp_path / "conversations.sqlite3"
    theirs = _foreign(path, f"CREATE TABLE {table} (x TEXT);")
    caplog.set_level(logging.WARNING, "stepahead")
    archive = ConversationArchive(path, 10)
    archive.create("a", Conversation("conv_1", 1, {}), [{"type": "message", "id": "msg_1", "role": "user",
                                                         "content": [{"type": "input_text", "text": "hi"}]}])
    assert archive.get("a", "conv_1").id == "conv_1"
    [aside] = _set_aside(path)
    assert aside.read_bytes() == theirs
    _warned(caplog, "the conversation archive", path, aside)


def test_a_response_archive_the_first_version_wrote_is_ours_and_its_rows_still_read(tmp_path, caplog):
    """The first version's rows had no `input_items` (nor `message_ids`): they read back
    listing none, and the file takes new rows (it was a 500 on every put)."""
    path = tmp_path / "responses.sqlite3"
    _foreign(path, "CREATE TABLE responses (tenant TEXT NOT NULL, id TEXT NOT NULL, used_s REAL NOT NULL, "
                   "response TEXT NOT NULL, messages TEXT NOT NULL, PRIMARY KEY (tenant, id));"
                   "CREATE INDEX responses_by_use ON responses (tenant, used_s);"
                   f"INSERT INTO responses VALUES ('a', 'resp_old', 1.0, '{{\"id\": \"resp_old\"}}', "
                   f"'{json.dumps(MESSAGES)}');")
    caplog.set_level(logging.WARNING, "stepahead")
    archive = ResponseArchive(path, 10)
    assert archive.get("a", "resp_old") == StoredResponse({"id": "resp_old"}, MESSAGES, ())
    new = StoredResponse({"id": "resp_new", "object": "response"}, MESSAGES, ({"type": "message"},))
    assert archive.put("a", new) and archive.get("a", "resp_new") == new
    assert _set_aside(path) == [] and not caplog.records


def test_a_gateway_whose_responses_file_holds_anothers_table_serves_stored_turns(fake_upstream, monkeypatch,
                                                                                 tmp_path):
    """What QA189 F2 met through HTTP: each stored turn a 500, each DELETE a 404."""
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    database = tmp_path / "responses.sqlite3"
    _foreign(database, "CREATE TABLE response_messages (x TEXT);")
    server = start_server(build_app(parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]})))
    url, headers = f"{server.base_url}/v1/responses", {"Authorization": f"Bearer {KEYS['alpha']}"}
    try:
        first = httpx.post(url, headers=headers, json={"model": "fake", "input": "hi"}, timeout=30)
        assert first.status_code == 200, first.text
        second = httpx.post(url, headers=headers, timeout=30,
                            json={"model": "fake", "input": "again", "previous_response_id": first.json()["id"]})
        assert second.status_code == 200, second.text
        assert httpx.get(f"{url}/{second.json()['id']}", headers=headers).json()["status"] == "completed"
        deleted = httpx.delete(f"{url}/{first.json()['id']}", headers=headers)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    finally:
        server.stop()
    assert len(_set_aside(database)) == 1
