"""The files a store's index set aside as damaged (`cache.damaged_files`) took the records
of with it: moved out of the live directory, for an operator to recover or remove, so the
directory holds only files its index records (`gateway.file_store`, `gateway.batch_store`).

Invariant: `set_aside_unrecorded` moves, never removes: a file goes to `orphaned-<UTC
time>/` (the time of the index's newest `.damaged-<UTC time>`, which holds its record) only
when it was last written before that set-aside, the live index has no record of it (asked
after the directory was listed, and a file gets its final name only once its record is
kept: so never one being written or not recorded yet), and its store's `move` lets it (a
batch's results: while no runner holds the batch's claim).
"""
from __future__ import annotations

import calendar
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from cache.private_paths import make_private_dirs
from cache.sqlite_file import SqliteFile
from gateway.directory_claim import claim_lock_file

DAMAGED_MARK = ".damaged-"   # cache.damaged_files: `<index name>.damaged-<UTC time>`
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
ORPHANED_PREFIX = "orphaned-"
ASKED_PER_QUERY = 500   # ids asked of an index in one statement (SQLite's limit on arguments: 32766)

log = logging.getLogger("stepahead.gateway")


@dataclass(slots=True)
class Orphans:
    """Files `set_aside_unrecorded` moved: how many, their bytes, where to, and the
    damaged index that holds their records."""

    num_files: int
    num_bytes: int
    moved_to: Path
    records_in: Path


class SweptIndex(SqliteFile):
    """A store's index (`SqliteFile`) that calls `after_set_aside()` each time it has set
    itself aside as damaged: the store then moves the files it no longer records."""

    __slots__ = ("after_set_aside",)

    def __init__(self, *args, after_set_aside: Callable[[], None], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.after_set_aside = after_set_aside

    def set_aside_damaged(self, why: str) -> None:
        super().set_aside_damaged(why)
        if self.path is not None:
            self.after_set_aside()


def newest_set_aside(index: Path) -> tuple[str, float] | None:
    """The UTC time (as named, and in seconds) of the newest `<index>.damaged-<UTC time>`
    beside `index`, None when there is none."""
    newest = None
    for aside in index.parent.glob(f"{index.name}{DAMAGED_MARK}*"):
        stamp = aside.name[len(index.name) + len(DAMAGED_MARK):][:16]   # its -wal and -shm: the same time
        try:
            at_s = float(calendar.timegm(time.strptime(stamp, STAMP_FORMAT)))
        except ValueError:
            continue
        if newest is None or at_s > newest[1]:
            newest = (stamp, at_s)
    return newest


def set_aside_unrecorded(index: Path, found: Mapping[str, Path], recorded: Callable[[list[str]], Collection[str]],
                         into: Path, move: Callable[[str, Path, Path], bool] | None = None) -> Orphans | None:
    """Move each of `found` (id -> file, listed before this call) that `index` no longer
    records, and that was last written before its newest set-aside, into
    `into/orphaned-<that set-aside's UTC time>/` under its own name; `recorded(ids)` says
    which of `ids` the live index records; `move(id, file, to)`, when given, moves a file
    itself (under a claim) and says whether it did. None when nothing was moved
    (also when the index was never set aside)."""
    newest = newest_set_aside(index)
    if newest is None:
        return None
    stamp, set_aside_s = newest
    older = {}
    for file_id, path in found.items():
        try:
            written = path.stat()
        except FileNotFoundError:   # removed meanwhile (deleted, expired)
            continue
        if written.st_mtime < set_aside_s:   # whole seconds: one written in its second is left
            older[file_id] = (path, written.st_size)
    if not older:
        return None
    known = set(recorded(list(older)))
    target = into / f"{ORPHANED_PREFIX}{stamp}"
    num_files = num_bytes = 0
    for file_id, (path, size) in older.items():
        if file_id in known:
            continue
        make_private_dirs(target)
        try:
            if move is not None:
                if not move(file_id, path, target / path.name):
                    continue
            else:
                os.replace(path, target / path.name)
        except FileNotFoundError:   # removed meanwhile (deleted, or another gateway's sweep moved it)
            continue
        num_files, num_bytes = num_files + 1, num_bytes + size
    if not num_files:
        return None
    return Orphans(num_files, num_bytes, target, index.with_name(f"{index.name}{DAMAGED_MARK}{stamp}"))


def orphans_line(orphans: Orphans, what: str, where: Path) -> str:
    """The warning for `orphans` (`what`: "file(s)", "batch result file(s)") moved out of `where`."""
    return (f"stepahead: warning: {orphans.num_files} {what} ({orphans.num_bytes} bytes) in {where} had their "
            f"records in the damaged index {orphans.records_in}, not in the one started afresh; moved them to "
            f"{orphans.moved_to} (to recover from there, or remove)")


def move_unrecorded(index: SqliteFile, table: str, found: Mapping[str, Path], into: Path, what: str,
                    move: Callable[[str, Path, Path], bool] | None = None) -> Orphans | None:
    """`set_aside_unrecorded` for a store whose `index` keeps an `id` per row of `table`,
    with one warning line saying what was moved (`what`: "file(s)") and where to; a
    failure (a read-only directory) is a warning too, and the next start tries again."""
    if index.path is None:
        return None

    def recorded(ids: list[str]) -> set[str]:
        known = set()
        for start in range(0, len(ids), ASKED_PER_QUERY):
            asked = ids[start:start + ASKED_PER_QUERY]
            known.update(row[0] for row in index.rows(
                f"SELECT id FROM {table} WHERE id IN ({', '.join('?' * len(asked))})", asked))
        return known
    try:
        orphans = set_aside_unrecorded(index.path, found, recorded, into, move)
    except (OSError, sqlite3.Error) as exc:
        log.warning("stepahead: warning: could not move aside the %s in %s that the damaged %s recorded (tried "
                    "again at the next start): %s: %s", what, into, index.what, type(exc).__name__, exc)
        return None
    if orphans is not None:
        log.warning(orphans_line(orphans, what, into))
    return orphans


def moved_under_claim(claims: Path) -> Callable[[str, Path, Path], bool]:
    """A `move` for `set_aside_unrecorded` that moves a file only while holding the claim
    `claims/<id>.lock` (`gateway.directory_claim`; a batch's: no runner, of this gateway
    or another, runs it meanwhile), then removes the lock file; False when it is held."""
    def move(file_id: str, path: Path, to: Path) -> bool:
        make_private_dirs(claims)
        claim = claim_lock_file(claims / f"{file_id}.lock")
        if not claim.held:
            return False
        try:
            os.replace(path, to)
            (claims / f"{file_id}.lock").unlink(missing_ok=True)   # while held, as a finished batch's
        finally:
            claim.release()
        return True
    return move
