"""The file store's index (`gateway/file_store.py`): its schema, and what the store does on
its directory at the start and when the index is set aside as damaged (a mixin of
`FileStore`, whose invariants these keep).

Invariants: the start's sweep runs first on the store's thread, before any upload: it
removes (or renames into place, when recorded) the partial files a killed gateway left,
never one a live writer holds (`gateway.partial_files`); then, once the index there was
opened (one that is no database is set aside then), it moves the files a damaged index
took the records of to `root/orphaned-<its UTC time>/`, never removing one
(`gateway.unrecorded_files`); partial files are never moved as unrecorded. The index keeps
the cursors of files deleted or expired (`file_cursors`, gateway/gone_cursors.py), so an
`after` naming one still pages on; an index made before that table gets it when opened.
"""
from __future__ import annotations

import logging

from gateway.gone_cursors import GoneCursors
from gateway.partial_files import sweep_partial_files
from gateway.unrecorded_files import move_unrecorded

FILE_CURSORS = GoneCursors("file_cursors", "files", ("tenant",))   # where a tenant's gone files stood
SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    expires_at INTEGER,
    seq INTEGER,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS files_by_time ON files (tenant, created_at);
CREATE INDEX IF NOT EXISTS files_by_name ON files (tenant, filename);
""" + FILE_CURSORS.schema
ADDED_COLUMNS = (("files", "expires_at", "INTEGER"), ("files", "seq", "INTEGER"))   # not in the first version's files

log = logging.getLogger("stepahead.gateway")


class FileIndexSweeps:
    """Uses `FileStore`'s `root` and `_file` (its `SweptIndex`)."""

    __slots__ = ()

    def _sweep_at_start(self) -> None:
        """The partial files of uploads a killed gateway was writing (`gateway.partial_files`);
        then, once an index there is was opened (one that is not a database is set aside
        then), the files an index set aside before took the records of."""
        removed = sweep_partial_files(self.root, lambda file_id: bool(
            self._file.rows("SELECT 1 FROM files WHERE id = ?", (file_id,))))
        if removed:
            log.warning("stepahead: warning: removed %d partial file(s) of uploads cut short (the gateway was killed "
                        "while writing them) from %s", removed, self.root)
        if self._file.path is not None and self._file.path.exists():
            self._file.rows("SELECT 1 FROM files LIMIT 1")
        self._set_aside_unrecorded()

    def _set_aside_unrecorded(self) -> None:
        """Move the files the newest damaged index took the records of to
        `root/orphaned-<its UTC time>/` (`gateway.unrecorded_files.move_unrecorded`)."""
        if self.root.is_dir():   # (with root None, the index is in memory: never set aside)
            move_unrecorded(self._file, "files", {path.name: path for path in self.root.glob("file-*")
                                                  if "." not in path.name}, self.root, "file(s)")   # not partial
