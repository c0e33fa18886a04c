"""The places the gateway's stores write, tried at its start, before the models load.

Stored responses, conversations, files and batches live in the responses' file, the
`conversations.sqlite3` and `files/` beside it (`[server] responses_db`,
$STEPAHEAD_RESPONSES_DB); budgeted tenants' spent tokens in their own file
($STEPAHEAD_SPENT_TOKENS). Each is opened on first use, so a place that cannot be written
showed only late: the batch runner's first read, once every model had loaded, failed the
start with tracebacks; a spent-tokens file that cannot be written failed only its saves,
and a restart then handed every budget out again. `check_store_places` tries them first.

Invariant: it returns having made the directories the stores make (0700, as they make
them: cache/private_paths.py; one that exists keeps its mode) and opened (then
closed) each SQLite file as its store opens it (schema made; a damaged file set aside,
as its store would), and, when some tenant has a `token_budget`, having written a file
beside the spent-tokens file (then removed it), which is not a directory, and beside the
trace store's file; or it raises `StartFailed` naming, in one line, every setting whose
place cannot be used (the first place of each, and why), so that one start tells all
there is to fix. Nothing is checked for responses kept in memory (":memory:"), nor for
the spent tokens when no tenant has a budget, nor for traces not stored.
`stepahead config check` asks it with `damaged`: then no SQLite file is set aside or
written (one found damaged is not opened, its place tried with a probe file instead:
the start sets it aside, a schema SQLite cannot read included, FI104), and each SQLite
file SQLite finds damaged, or holding another program's tables (QA189 F2, QA196 F2: the
indexes too), asked read-only
(`cache.damaged_files.find_damage`), the trace store, the responses', the
conversations', and the Files and Batch APIs' indexes, is one line saying what the
gateway will do with it and what follows (QA179 F2: the check set a damaged archive
aside and said nothing, and never looked at the indexes whose set-aside moves every
tenant's files away).
"""
from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cache.damaged_files import Damage, find_damage, is_damaged_database
from cache.error_text import one_line_error
from cache.private_paths import make_private_dirs
from cache.sqlite_file import SqliteFile
from gateway.batch_index import ADDED_COLUMNS as BATCH_ADDED_COLUMNS
from gateway.batch_index import SCHEMA as BATCH_SCHEMA
from gateway.config import GatewayConfig
from gateway.conversation_archive import ConversationArchive
from gateway.file_index import ADDED_COLUMNS as FILE_ADDED_COLUMNS
from gateway.file_index import SCHEMA as FILE_SCHEMA
from gateway.response_archive import ResponseArchive
from gateway.spent_tokens import PATH_ENV as SPENT_TOKENS_ENV
from gateway.spent_tokens import spent_tokens_path
from gateway.start_failure import StartFailed
from gateway.store_thread import STORE_FAILURES
from gateway.unrecorded_files import DAMAGED_MARK, ORPHANED_PREFIX

RESPONSES_SETTING = "[server] responses_db or $STEPAHEAD_RESPONSES_DB"
TRACES_SETTING = "[tracing] store_path or $STEPAHEAD_TRACE_DB"


@dataclass(frozen=True, slots=True)
class PlaceProblem:
    """Why a store's place cannot be used: `text` names the place, the reason and the
    setting that moves it; `cause` is the error that said so (None for a path that is a
    directory)."""

    text: str
    cause: BaseException | None = None


def check_store_places(config: GatewayConfig, environ: Mapping[str, str] = os.environ,
                       damaged: list[str] | None = None) -> None:
    """Raise StartFailed when a place `config`'s stores write cannot be used (the module
    docstring); blocking: call it off the event loop. `damaged` given (`config check`):
    no SQLite file is set aside, and it gains a line for each one SQLite finds damaged."""
    problems = [problem for problem in (trace_store_problem(config, environ, damaged),
                                        responses_problem(config, environ, damaged),
                                        spent_tokens_problem(budgeted_tenants(config), environ))
                if problem is not None]
    if problems:
        # one line: the report is read back from the last line of uvicorn's traceback
        raise StartFailed("; ".join(problem.text for problem in problems)) from problems[0].cause


def trace_store_problem(config: GatewayConfig, environ: Mapping[str, str] = os.environ,
                        damaged: list[str] | None = None) -> PlaceProblem | None:
    """Why the trace store's file cannot be made beside (None when it can, or when no
    traces are stored); its store opens it at the start. `damaged`: as `check_store_places`'."""
    tracing = config.tracing
    if not (tracing.enabled and tracing.store_enabled):
        return None
    place = tracing.resolved_store_path(environ)
    if damaged is not None:
        _note_damage(damaged, "the trace store", place, find_damage(place),
                     "the traces it holds stay in the moved file")
    try:
        write_beside(place)
    except OSError as exc:
        return PlaceProblem(f"the trace store {place}: {one_line_error(exc)} (set {TRACES_SETTING} to a place it can "
                            "write)", exc)
    return None


def responses_problem(config: GatewayConfig, environ: Mapping[str, str] = os.environ,
                      damaged: list[str] | None = None) -> PlaceProblem | None:
    """Why the first place that follows the responses' file (that file, the conversations'
    file, the Files API's directory) cannot be used; None when all can, or responses are
    kept in memory. One setting moves them all: the first reason is the one to fix.
    `damaged`: as `check_store_places`'; a file found damaged is then tried as a place
    only, not opened (opening sets one whose header or schema SQLite cannot read aside,
    and writes the schema into one whose other pages are damaged)."""
    responses = config.resolved_responses_db(environ)
    if responses is None:
        return None
    for what, archive, lost in (
            ("the stored responses' file", lambda: ResponseArchive(responses, config.responses_per_tenant),
             "every tenant's stored responses"),
            ("the conversations' file", lambda: ConversationArchive(
                config.resolved_conversations_db(environ), config.conversations_per_tenant),
             "every tenant's conversations")):
        opened = archive()
        damage = None if damaged is None else find_damage(opened.path)
        if damaged is not None and damage is None:   # another program's tables: set aside when opened (QA189 F2)
            foreign = opened.file.find_foreign_tables()   # (asked read-only)
            damage = None if foreign is None else Damage(foreign, on_open=True)
        try:
            if damage is not None:
                write_beside(opened.path)
            else:
                opened.db   # noqa: B018  (opening is the check)
        except STORE_FAILURES as exc:
            return PlaceProblem(f"{what} {opened.path}: {one_line_error(exc)} ({_what_to_do(exc)})", exc)
        finally:
            opened.close()
        if damaged is not None:
            _note_damage(damaged, what, opened.path, damage, f"{lost} then answer 404 (they stay in the moved file)")
    files = config.resolved_files_dir(environ)
    try:
        write_beside(files / "files.sqlite3")
    except OSError as exc:
        return PlaceProblem(f"the Files and Batch APIs' directory {files}: {one_line_error(exc)} "
                            f"(set {RESPONSES_SETTING} to a place it can write)", exc)
    if damaged is not None:
        damaged.extend(index_damage(files))
    return None


def _what_to_do(exc: BaseException) -> str:
    """The fix an archive's opening failing with `exc` asks for (QA181 F3): a damaged file
    (the start sets one aside: this one it could not, or the new one was damaged too) wants
    moving or restoring, a locked one the other process stopped, anything else a place this
    gateway can write."""
    if is_damaged_database(exc):
        return ("the file is damaged and was not set aside: move it away, or restore it from a backup; "
                "the next start then begins a new one")
    if isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorname", None) or "").startswith(
            ("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"another process holds the file locked: stop it, or set {RESPONSES_SETTING} to a place of its own"
    return f"set {RESPONSES_SETTING} to a place it can write"


def index_damage(files: Path) -> list[str]:
    """A line for the Files and for the Batch API's index in `files` that SQLite finds
    damaged, or that holds tables of our names another program made (QA196 F2; both
    found read-only: the start sets either aside, `cache.sqlite_file`), saying what the
    gateway will do with it and the files it records (`gateway.file_index`,
    `gateway.batch_index`: every tenant's, moved to `orphaned-<UTC time>/`)."""
    found: list[str] = []
    results_dir = files / "batch_results"
    for what, table, kept, directory, recorded, schema, added in (
            ("the Files API's index", "files", "file(s)", files,   # (a partial upload's name has a ".")
             lambda: [path for path in files.glob("file-*") if "." not in path.name], FILE_SCHEMA, FILE_ADDED_COLUMNS),
            ("the Batch API's index", "batches", "result file(s)", results_dir,
             lambda: list(results_dir.glob("*.jsonl")), BATCH_SCHEMA, BATCH_ADDED_COLUMNS)):
        index = files / f"{table}.sqlite3"
        damage = find_damage(index, f"SELECT * FROM {table}")   # what the start's migration reads
        if damage is None:   # another program's tables, as the store declares its own (its migration makes none)
            foreign = SqliteFile(index, what, schema, added).find_foreign_tables()
            damage = None if foreign is None else Damage(foreign, on_open=True)
        if damage is not None:
            _note_damage(found, what, index, damage,
                         f"every tenant's {table} then answer 404" + _moved(len(recorded()), kept, directory))
    return found


def _moved(count: int, what: str, directory: Path) -> str:
    """What moving the `count` files (`what`: "file(s)") an index recorded out of `directory` is."""
    if not count:
        return f" (there is no {what.removesuffix('(s)')} in {directory} to move)"
    return f", the {count} {what} in {directory} moved to {directory / ORPHANED_PREFIX}<UTC time>/"


def _note_damage(lines: list[str], what: str, path: Path, damage: Damage | None, then: str) -> None:
    """Add to `lines` what the gateway will do with the store at `path` that SQLite finds
    damaged as `damage` says (nothing when None): set it aside (`cache.damaged_files`),
    at its start when opening it meets the damage, else when a read does; `then` what
    follows."""
    if damage is None:
        return
    when = "at its start" if damage.on_open else "when it reads a damaged page (at its start or later)"
    lines.append(f"{what} {path} {damage.why}: {when}, the gateway will move it to {path}{DAMAGED_MARK}<UTC time> "
                 f"and start a new, empty one; {then}")


def budgeted_tenants(config: GatewayConfig) -> list[str]:
    """The names of `config`'s tenants that have a `token_budget`, sorted."""
    return sorted(tenant.name for tenant in config.tenants if tenant.limits.token_budget is not None)


def check_spent_tokens_place(budgeted: list[str], environ: Mapping[str, str] = os.environ) -> None:
    """Raise StartFailed, naming the tenants `budgeted`, when the spent tokens file cannot
    be written beside (nothing is tried without budgeted tenants), or is a directory.
    Blocking."""
    problem = spent_tokens_problem(budgeted, environ)
    if problem is not None:
        raise StartFailed(problem.text) from problem.cause


def spent_tokens_problem(budgeted: list[str], environ: Mapping[str, str] = os.environ) -> PlaceProblem | None:
    """What `check_spent_tokens_place` raises, or None."""
    spent = spent_tokens_path(environ)
    if spent.is_dir():   # read at every start, budgets or not
        return PlaceProblem(f"the tenants' spent tokens file {spent} is a directory (set ${SPENT_TOKENS_ENV} to a "
                            "file path)")
    if not budgeted:
        return None
    try:
        write_beside(spent)
    except OSError as exc:
        names = ", ".join(repr(name) for name in budgeted)
        return PlaceProblem(f"the tenants' spent tokens file {spent}: {one_line_error(exc)}: the token budgets "
                            f"of {names} would not hold across a restart (set ${SPENT_TOKENS_ENV} to a "
                            "file it can write)", exc)
    return None


def write_beside(path: Path) -> None:
    """Make `path`'s directory, as its store would (private: `cache.private_paths`), and
    write (then remove) a file there: an OSError when that cannot be done (a read-only
    disk, a path under a file)."""
    make_private_dirs(path.parent)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".check") as probe:
        probe.write(b"x")
        probe.flush()
