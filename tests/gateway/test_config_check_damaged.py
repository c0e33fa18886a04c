"""`config check` changes no damaged store and says what the gateway will do with each
(QA179 F2): the responses' and conversations' files, the Files and Batch APIs' indexes
and the trace store, found damaged read-only, are warnings (on stderr and in `--json`'s
"warnings") that fail nothing; the files stay as they were. The start still sets a
damaged file aside as before."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from gateway.batch_index import SCHEMA as BATCH_SCHEMA
from gateway.cli import main
from gateway.config import key_digest, load_config
from gateway.config_check import check_config_file
from gateway.file_index import SCHEMA as FILE_SCHEMA
from gateway.store_places import check_store_places

PORT = 23700   # this test file's port (the brief's range)
GARBAGE = b"garbage garbage!"   # over SQLite's header: no database


def _database(path: Path, schema: str, rows: str = "") -> None:
    db = sqlite3.connect(path)
    db.executescript(schema + rows)
    db.commit()
    db.close()


def _stores(tmp_path: Path) -> tuple[str, Path]:
    """A config whose stores are all in `data/`, each made healthy: responses,
    conversations, the Files index (recording 2 uploads there), the Batch index (one
    result file), and the trace store."""
    data = tmp_path / "data"
    (data / "files" / "batch_results").mkdir(parents=True)
    for name in ("responses", "conversations"):
        _database(data / f"{name}.sqlite3", "CREATE TABLE t (x);", "INSERT INTO t VALUES (1);")
    _database(data / "files" / "files.sqlite3", FILE_SCHEMA,
              "INSERT INTO files VALUES ('a', 'file-1', 1, 0, 'x', 'batch', NULL, 1);")
    _database(data / "files" / "batches.sqlite3", BATCH_SCHEMA, "INSERT INTO batches VALUES ('a', 'b1', 0, '{}', 1);")
    for name in ("file-1", "file-2"):
        (data / "files" / name).write_bytes(b"{}\n")
    (data / "files" / "batch_results" / "batch_1.jsonl").write_bytes(b"{}\n")
    _database(data / "traces.sqlite3", "CREATE TABLE t (x);")
    path = tmp_path / "gw.toml"
    path.write_text(f'[server]\nport = {PORT}\nresponses_db = "{data}/responses.sqlite3"\n'
                    '[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                    f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n'
                    f'[tracing]\nenabled = true\nstore_path = "{data}/traces.sqlite3"\n')
    return str(path), data


def _spoil_header(path: Path) -> None:
    with open(path, "r+b") as file:
        file.write(GARBAGE)


def _snapshot(data: Path, names: tuple[str, ...]) -> tuple[list[str], dict[str, bytes]]:
    """The names of the files under `data` (but -wal and -shm, which SQLite makes for a
    reader), and the bytes of `names`."""
    return ([str(p.relative_to(data)) for p in sorted(data.rglob("*")) if not p.name.endswith(("-wal", "-shm"))],
            {name: (data / name).read_bytes() for name in names})


def test_damaged_stores_are_warnings_saying_what_the_start_does_and_are_left_as_they_are(tmp_path, capsys):
    path, data = _stores(tmp_path)
    damaged = ("conversations.sqlite3", "files/files.sqlite3", "files/batches.sqlite3", "traces.sqlite3")
    for name in damaged:
        _spoil_header(data / name)
    before = _snapshot(data, damaged)
    result = check_config_file(path)
    assert result.ok and result.errors == ()
    assert _snapshot(data, damaged) == before   # none set aside, nor written; nothing moved
    moved = "is not a SQLite database: at its start, the gateway will move it to {}.damaged-<UTC time> and start " \
            "a new, empty one; "
    files = data / "files"
    assert result.warnings == (
        f"the trace store {data / 'traces.sqlite3'} " + moved.format(data / "traces.sqlite3")
        + "the traces it holds stay in the moved file",
        f"the conversations' file {data / 'conversations.sqlite3'} " + moved.format(data / "conversations.sqlite3")
        + "every tenant's conversations then answer 404 (they stay in the moved file)",
        f"the Files API's index {files / 'files.sqlite3'} " + moved.format(files / "files.sqlite3")
        + f"every tenant's files then answer 404, the 2 file(s) in {files} moved to {files}/orphaned-<UTC time>/",
        f"the Batch API's index {files / 'batches.sqlite3'} " + moved.format(files / "batches.sqlite3")
        + f"every tenant's batches then answer 404, the 1 result file(s) in {files / 'batch_results'} moved to "
          f"{files / 'batch_results'}/orphaned-<UTC time>/")
    assert main(["config", "check", "--json", path]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert (reply["ok"], reply["errors"], reply["warnings"]) == (True, [], list(result.warnings))
    assert main(["config", "check", path]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}: ok\n")
    assert err == "".join(f"stepahead: warning: {warning}\n" for warning in result.warnings)
    assert _snapshot(data, damaged) == before


def _spoil_page(path: Path, table: str | None) -> None:
    """Overwrite the root page of `table`'s b-tree (None: the schema's, page 1, after the header)."""
    db = sqlite3.connect(path)
    page_size, = db.execute("PRAGMA page_size").fetchone()
    root, = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone() if table else (1,)
    db.close()
    start = (root - 1) * page_size + (100 if root == 1 else 0)
    with open(path, "r+b") as file:
        file.seek(start)
        file.write(b"\xff" * (root * page_size - start))


def test_a_damaged_page_the_start_does_not_read_is_said_to_be_set_aside_when_read(tmp_path):
    """The responses' file opens (its schema is whole) but its table's page is damaged:
    the check leaves it unopened and unchanged, and warns."""
    path, data = _stores(tmp_path)
    responses = data / "responses.sqlite3"
    _spoil_page(responses, "t")
    before = responses.read_bytes()
    result = check_config_file(path)
    assert result.ok, result.errors
    [warning] = result.warnings
    assert warning.startswith(f"the stored responses' file {responses} is damaged (")
    assert ": when it reads a damaged page (at its start or later), the gateway will move it to " in warning
    assert responses.read_bytes() == before and not list(data.glob("*.damaged-*"))


def test_an_archive_whose_schema_is_damaged_is_a_warning_that_the_start_sets_it_aside(tmp_path):
    """FI104: the start sets it aside (tests/gateway/test_archive_schema_damaged.py), so
    the check warns so, as for a file that is no database; it was the start's error then
    ("database disk image is malformed (set [server] responses_db ... to a place it can
    write)"). The file is not opened: unchanged."""
    path, data = _stores(tmp_path)
    conversations = data / "conversations.sqlite3"
    _spoil_page(conversations, None)
    before = conversations.read_bytes()
    result = check_config_file(path)
    assert result.ok and result.errors == ()
    assert result.warnings == (
        f"the conversations' file {conversations} is damaged (database disk image is malformed): at its start, the "
        f"gateway will move it to {conversations}.damaged-<UTC time> and start a new, empty one; every tenant's "
        "conversations then answer 404 (they stay in the moved file)",)
    assert conversations.read_bytes() == before and not list(data.glob("*.damaged-*"))


def test_the_start_still_sets_a_file_that_is_no_database_aside(tmp_path):
    path, data = _stores(tmp_path)
    _spoil_header(data / "conversations.sqlite3")
    check_store_places(load_config(path))
    assert [p.name.split(".damaged-")[0] for p in data.glob("*.damaged-*")] == ["conversations.sqlite3"]
