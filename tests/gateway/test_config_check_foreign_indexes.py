"""`config check` says what the start will do with a Files or Batch index whose table is
another program's (QA196 F2: it said `ok`, and the start then set the index aside and moved
every stored file to `orphaned-*/`), and leaves it, and the files, as they are; an index an
older version of ours wrote is no warning. The start then does as it said."""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from gateway.batch_store import BatchStore
from gateway.config import key_digest
from gateway.config_check import check_config_file
from gateway.file_store import FileStore

PORT = 24140   # this file's port (the brief's range); nothing listens


def _database(path: Path, script: str) -> None:
    db = sqlite3.connect(path)
    db.executescript(script)
    db.commit()
    db.close()


def _config(tmp_path: Path) -> tuple[str, Path]:
    data = tmp_path / "data"
    (data / "files" / "batch_results").mkdir(parents=True)
    path = tmp_path / "gw.toml"
    path.write_text(f'[server]\nport = {PORT}\nresponses_db = "{data}/responses.sqlite3"\n'
                    '[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                    f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n')
    return str(path), data / "files"


def _contents(files: Path) -> dict[str, bytes]:
    return {str(p.relative_to(files)): p.read_bytes() for p in sorted(files.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_indexes_holding_another_programs_tables_are_warnings_and_the_start_then_does_as_they_say(tmp_path):
    path, files = _config(tmp_path)
    _database(files / "files.sqlite3", "CREATE TABLE files (x TEXT); INSERT INTO files VALUES ('theirs');")
    _database(files / "batches.sqlite3", "CREATE TABLE batches (tenant TEXT, id TEXT, note TEXT NOT NULL);")
    (files / "file-0123456789abcdef01234567").write_bytes(b"some bytes\n")
    (files / "batch_results" / "batch_1.jsonl").write_bytes(b"{}\n")
    for stored in (files / "file-0123456789abcdef01234567", files / "batch_results" / "batch_1.jsonl"):
        os.utime(stored, (time.time() - 3600,) * 2)   # written before the start (what it moves)
    before = _contents(files)
    result = check_config_file(path)
    assert result.ok and result.errors == ()
    assert _contents(files) == before   # nothing set aside, written or moved
    results = files / "batch_results"
    assert result.warnings == (
        f"the Files API's index {files / 'files.sqlite3'} holds tables that are not ours (files lacks tenant, id, "
        "bytes, created_at, filename, purpose): at its start, the gateway will move it to "
        f"{files / 'files.sqlite3'}.damaged-<UTC time> and start a new, empty one; every tenant's files then answer "
        f"404, the 1 file(s) in {files} moved to {files}/orphaned-<UTC time>/",
        f"the Batch API's index {files / 'batches.sqlite3'} holds tables that are not ours (batches lacks "
        "created_at, record): at its start, the gateway will move it to "
        f"{files / 'batches.sqlite3'}.damaged-<UTC time> and start a new, empty one; every tenant's batches then "
        f"answer 404, the 1 result file(s) in {results} moved to {results}/orphaned-<UTC time>/")

    for store in (FileStore(files), BatchStore(files)):   # opened as the start opens them (their sweeps run first)
        store.close()
    assert [p.name.split(".damaged-")[0] for p in sorted(files.glob("*.damaged-*"))] == ["batches.sqlite3",
                                                                                         "files.sqlite3"]
    assert [p.name for p in files.glob("orphaned-*/*")] == ["file-0123456789abcdef01234567"]
    assert [p.name for p in results.glob("orphaned-*/*")] == ["batch_1.jsonl"]


def test_indexes_an_older_version_of_ours_wrote_are_no_warning(tmp_path):
    """The first Files/Batch version's tables (no `expires_at`, no `seq`) are ours."""
    path, files = _config(tmp_path)
    _database(files / "files.sqlite3", "CREATE TABLE files (tenant TEXT NOT NULL, id TEXT NOT NULL, bytes INTEGER "
              "NOT NULL, created_at INTEGER NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL, "
              "PRIMARY KEY (tenant, id));")
    _database(files / "batches.sqlite3", "CREATE TABLE batches (tenant TEXT NOT NULL, id TEXT NOT NULL, created_at "
              "INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (tenant, id));")
    before = _contents(files)
    result = check_config_file(path)
    assert (result.ok, result.errors, result.warnings) == (True, (), ())
    assert _contents(files) == before
