"""`config check` says what the start will do with a responses' or conversations' file
whose tables are another program's (QA189 F2), and leaves it as it is; the start sets it
aside (tests/gateway/test_archive_foreign_tables.py)."""
from __future__ import annotations

import sqlite3

from gateway.config import key_digest
from gateway.config_check import check_config_file


def test_a_file_with_another_programs_tables_is_a_warning_and_is_left_as_it_is(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    responses = data / "responses.sqlite3"
    db = sqlite3.connect(responses)
    db.executescript("CREATE TABLE response_messages (x TEXT); INSERT INTO response_messages VALUES ('theirs');")
    db.close()
    theirs = responses.read_bytes()
    path = tmp_path / "gw.toml"
    path.write_text(f'[server]\nport = 23799\nresponses_db = "{responses}"\n'
                    '[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                    f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n')
    result = check_config_file(str(path))
    assert result.ok and result.errors == ()
    assert responses.read_bytes() == theirs and not list(data.glob("*.damaged-*"))
    assert result.warnings == (
        f"the stored responses' file {responses} holds tables that are not ours (response_messages lacks id, "
        f"tenant, digest, refs, message): at its start, the gateway will move it to {responses}.damaged-<UTC time> "
        "and start a new, empty one; every tenant's stored responses then answer 404 (they stay in the moved file)",)
