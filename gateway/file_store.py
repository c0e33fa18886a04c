"""Files of the Files API (`/v1/files`): each tenant's uploads and the Batch API's output
files, their bytes on disk, their records in SQLite.

Invariants:
- a file is found only by the tenant that owns it (another tenant's ids read as unknown);
- a file past its `expires_at` is never found, listed or deleted again (a 404, as for an
  unknown id); its record and bytes are removed by the next upload or listing of any
  tenant (`_remove_expired`);
- an upload given a cap (`add`'s `max_tenant_bytes`) is kept only if the bytes of its
  tenant's live files stay within it (gateway/file_quota.py): checked before its bytes
  are written, and again in the one statement that records it;
- a file's bytes are written to `root/<id>.partial`, locked (`flock`) by their writer
  until its record exists and they are renamed `root/<id>`; a record is removed before its
  bytes; a file's bytes never change. A kill -9 mid-write leaves only a partial file,
  which the next start of a store on `root` (`gateway.partial_files`) removes, or renames
  into place when its record was written: never one that a live writer (of this gateway
  or another sharing `root`) holds, nor an empty one made in the last `PARTIAL_GRACE_S`;
- an index found damaged is set aside and a new one started: the files it recorded go to
  `root/orphaned-<its UTC time>/` then, or at the next start, with one warning
  (`gateway.unrecorded_files.set_aside_unrecorded` says which): `root` keeps recorded files
  (the start's sweep and this one: gateway/file_index.py);
- a batch's output or error file (`add_output`) is its tenant's one live file of its
  name: a batch finished again (a crash after its files, before its final status) reuses
  the file of the same bytes, and removes any other of that name;
- the event loop never touches the disk: every call runs on the store's one thread;
- `root` None keeps the files in a temporary directory (made on first use), removed at
  `close()`;
- what it makes is private to this user (`cache.private_paths`): `root` (when missing)
  0700, each file's bytes 0600;
- a tenant's files are listed in the order they were made (`seq`, rising per tenant):
  whole-second `created_at` and random ids cannot order files made in one second;
- a file deleted, expired, or replaced by a batch's new output leaves its cursor
  (`FILE_CURSORS`, gateway/gone_cursors.py) in the same transaction that removes its
  record: an `after` naming it lists from where it stood for GONE_KEPT_S (QA180: deleting
  while paging), while an id its tenant never had is a 400; a new file is numbered past
  the cursors too, never where a gone file stood;
- a page, up to 10,000 files (the Files API's limit), is read in one query.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cache.private_paths import make_private_dirs, private_opener
from cache.sqlite_transaction import transaction
from gateway.errors import body_too_large
from gateway.file_index import ADDED_COLUMNS, FILE_CURSORS, SCHEMA, FileIndexSweeps
from gateway.file_records import StoredFile, file_not_found
from gateway.file_quota import UploadReservations, file_storage_full
from gateway.ids import random_hex
from gateway.list_page import ListPage
from gateway.tenant_seq import number_unnumbered
from gateway.partial_files import lock_while_written, partial_path
from gateway.unrecorded_files import SweptIndex
from gateway.store_thread import StoreThread, TemporaryRoot

COLUMNS = "id, bytes, created_at, filename, purpose, expires_at"
REMOVED_PER_SWEEP = 256
# a new file's seq: past its tenant's files and the cursors of those gone (its two arguments: the tenant)
NEXT_SEQ = f"({FILE_CURSORS.last_seq()} + 1)"


def _migrate(db) -> None:
    """After the schema and the added columns: number old rows, and index the expiry the
    sweep on every upload and list asks for (an old index got `expires_at` only now)."""
    number_unnumbered(db, "files", "rowid")
    db.execute("CREATE INDEX IF NOT EXISTS files_by_expiry ON files (expires_at)")


class FileStore(FileIndexSweeps):
    def __init__(self, root: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._root = root
        self._temporary = TemporaryRoot("stepahead-files-") if root is None else None
        self.clock = clock
        # NOTE: a file's row is never replaced, so rowid is the order old rows were made in
        self._file = SweptIndex(None if root is None else root / "files.sqlite3", "the file index", SCHEMA,
                                ADDED_COLUMNS, migrate=_migrate,
                                after_set_aside=self._set_aside_unrecorded)
        self._thread = StoreThread("stepahead-files", "the file store")
        self.uploads = UploadReservations()   # on the event loop: the upload route's early refusals
        if root is not None:   # first on the thread: before any upload of this store
            self._thread.submit(self._sweep_at_start)

    @property
    def root(self) -> Path:
        return self._root if self._temporary is None else self._temporary.path

    # --- on the store's thread ---------------------------------------------------------

    def _add(self, tenant: str, filename: str, purpose: str, write: Callable[[IO[bytes]], None],
             expires_after_s: int | None, cap: int | None = None, size_of: Callable[[], int] | None = None
             ) -> StoredFile:
        """Keep what `write` writes; with a `cap`, only if the tenant's live files stay
        within it (`size_of`, the bytes `write` will write, checked before it runs)."""
        self._remove_expired()
        if cap is not None and size_of is not None:
            held, size = self._stored_bytes(tenant), size_of()
            if held + size > cap or cap == 0:   # a cap of 0 refuses every upload, an empty one too
                raise file_storage_full(cap, held, size)
        make_private_dirs(self.root)
        file_id = f"file-{random_hex(24)}"
        partial = partial_path(self.root, file_id)
        with open(partial, "wb", opener=private_opener) as out:   # undone under the lock: a sweep waits for it
            kept_at, recorded = partial, False
            try:
                lock_while_written(out)   # until renamed: a sweep skips it
                write(out)
                out.flush()
                num_bytes = out.tell()
                now = int(self.clock())
                stored = StoredFile(file_id, num_bytes, now, filename, purpose,
                                    None if expires_after_s is None else now + expires_after_s)
                row = (tenant, file_id, num_bytes, now, filename, purpose, stored.expires_at, tenant, tenant)
                if cap is None:
                    self._file.change(f"INSERT INTO files (tenant, {COLUMNS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, "
                                      f"{NEXT_SEQ})", row)
                elif not self._insert_within(cap, row):
                    raise file_storage_full(cap, self._stored_bytes(tenant), num_bytes)
                recorded = True
                os.replace(partial, self.root / file_id)
                kept_at = self.root / file_id
            except BaseException:
                if recorded:
                    self._file.change("DELETE FROM files WHERE tenant = ? AND id = ?", (tenant, file_id))
                kept_at.unlink(missing_ok=True)
                raise
        return stored

    def _add_output(self, tenant: str, filename: str, purpose: str, data: bytes,
                    expires_after_s: int | None) -> StoredFile | None:
        """The tenant's one live file of `purpose` (one only the server makes) named
        `filename`, holding `data`: the one kept already (a batch finished again after a
        crash) if it holds `data`, else a new one (None when `data` is empty); any other
        of that name is removed."""
        live, now = self._live()
        reused = None
        for row in self._file.rows(f"SELECT {COLUMNS} FROM files WHERE tenant = ? AND filename = ? AND purpose = ? "
                                   f"AND {live} ORDER BY seq", (tenant, filename, purpose, now)):
            stored = StoredFile(*row)
            if reused is None and data and stored.bytes == len(data) and self._holds(stored, data):
                reused = stored
            else:
                self._remove(tenant, stored.id)
                (self.root / stored.id).unlink(missing_ok=True)
        if reused is not None or not data:
            return reused
        return self._add(tenant, filename, purpose, lambda out: out.write(data), expires_after_s)

    def _holds(self, stored: StoredFile, data: bytes) -> bool:
        try:
            return (self.root / stored.id).read_bytes() == data
        except FileNotFoundError:
            return False

    def _insert_within(self, cap: int, row: tuple) -> bool:
        """Record `row` (as `_add` gives it) if its tenant's live files stay within `cap`
        with it: one statement, so no other upload (of this gateway or another on the same
        file) can pass the cap beside it."""
        live, now = self._live()
        tenant, num_bytes = row[0], row[2]
        return self._file.change(
            f"INSERT INTO files (tenant, {COLUMNS}, seq) SELECT ?, ?, ?, ?, ?, ?, ?, {NEXT_SEQ} "
            f"WHERE (SELECT COALESCE(SUM(bytes), 0) FROM files WHERE tenant = ? AND {live}) + ? <= ?",
            (*row, tenant, now, num_bytes, cap)) == 1

    def _stored_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's live files."""
        live, now = self._live()
        return self._file.rows(f"SELECT COALESCE(SUM(bytes), 0) FROM files WHERE tenant = ? AND {live}",
                               (tenant, now))[0][0]

    def _remove_expired(self) -> None:
        """Remove up to REMOVED_PER_SWEEP expired files, records first (their cursors kept),
        then bytes; and up to as many cursors kept past their time."""
        expired = self._file.rows("SELECT tenant, id FROM files WHERE expires_at <= ? LIMIT ?",
                                  (int(self.clock()), REMOVED_PER_SWEEP))
        for tenant, file_id in expired:
            self._remove(tenant, file_id)
            (self.root / file_id).unlink(missing_ok=True)
        self._file.surviving(lambda: FILE_CURSORS.forget_old(self._file.db, self.clock()))

    def _remove(self, tenant: str, file_id: str, live_only: bool = False) -> bool:
        """Remove the tenant's record of `file_id` (with `live_only`, only while it has not
        expired), keeping its cursor in the same transaction; whether one was removed."""
        live, now = self._live()
        condition, args = (f" AND {live}", (now,)) if live_only else ("", ())

        def remove() -> bool:
            with transaction(self._file.db, "BEGIN IMMEDIATE") as db:
                FILE_CURSORS.keep(db, (tenant,), file_id, self.clock())
                return db.execute(f"DELETE FROM files WHERE tenant = ? AND id = ?{condition}",
                                  (tenant, file_id, *args)).rowcount > 0
        return self._file.surviving(remove)

    def _live(self) -> tuple[str, int]:
        """The condition and argument that leave out expired files."""
        return "(expires_at IS NULL OR expires_at > ?)", int(self.clock())

    def _get(self, tenant: str, file_id: str) -> StoredFile:
        """The tenant's live file, else a 404."""
        live, now = self._live()
        rows = self._file.rows(f"SELECT {COLUMNS} FROM files WHERE tenant = ? AND id = ? AND {live}",
                               (tenant, file_id, now))
        if not rows:
            raise file_not_found(file_id)
        return StoredFile(*rows[0])

    def _delete(self, tenant: str, file_id: str) -> None:
        if not self._remove(tenant, file_id, live_only=True):   # (an expired one's cursor is kept all the same)
            raise file_not_found(file_id)
        (self.root / file_id).unlink(missing_ok=True)

    def _list(self, tenant: str, purpose: str | None, page: ListPage) -> tuple[list[StoredFile], bool]:
        self._remove_expired()
        live, now = self._live()
        where, args = f"tenant = ? AND {live}", [tenant, now]
        if purpose is not None:
            where, args = where + " AND purpose = ?", [*args, purpose]
        order = "ASC" if page.order == "asc" else "DESC"
        if page.after is not None:
            after_seq = self._place_of(tenant, page.after)
            if after_seq is None:
                raise page.unknown_after("file")
            where += f" AND seq {'>' if order == 'ASC' else '<'} ?"
            args.append(after_seq)
        rows = self._file.rows(f"SELECT {COLUMNS} FROM files WHERE {where} ORDER BY seq {order} LIMIT ?",
                               (*args, page.limit + 1))   # the whole page in one query, even 10,000 files
        return [StoredFile(*row) for row in rows[:page.limit]], len(rows) > page.limit

    def _place_of(self, tenant: str, file_id: str) -> int | None:
        """Where `file_id` stands in the tenant's list (its `seq`): its record's, expired or
        not, else its cursor's while kept; None for an id the tenant never had."""
        rows = self._file.rows("SELECT seq FROM files WHERE tenant = ? AND id = ?", (tenant, file_id))
        if rows:
            return rows[0][0]
        return self._file.surviving(lambda: FILE_CURSORS.seq_of(self._file.db, (tenant,), file_id))

    # --- from the event loop -------------------------------------------------------------

    async def add(self, tenant: str, filename: str, purpose: str, source: IO[bytes],
                  max_bytes: int | None = None, expires_after_s: int | None = None,
                  max_tenant_bytes: int | None = None) -> StoredFile:
        """Keep a copy of `source` (read from its start) as a new file, for
        `expires_after_s` from now (None: until deleted); one past `max_bytes` is a 413,
        one that would bring the tenant's live files past `max_tenant_bytes` a 400
        (`file_storage_full`), and nothing of it is kept."""
        def write(out: IO[bytes]) -> None:
            source.seek(0)
            while chunk := source.read(1 << 20):
                out.write(chunk)
                if max_bytes is not None and out.tell() > max_bytes:
                    raise body_too_large(max_bytes)
        return await self._thread.call(self._add, tenant, filename, purpose, write, expires_after_s,
                                       max_tenant_bytes, lambda: source.seek(0, 2))

    async def add_bytes(self, tenant: str, filename: str, purpose: str, data: bytes,
                        expires_after_s: int | None = None) -> StoredFile:
        """Keep `data` (a batch's output or error file): never refused for its tenant's cap."""
        return await self._thread.call(self._add, tenant, filename, purpose, lambda out: out.write(data),
                                       expires_after_s)

    async def add_output(self, tenant: str, filename: str, purpose: str, data: bytes,
                         expires_after_s: int | None = None) -> StoredFile | None:
        """Keep `data` (a batch's output or error file) as the tenant's one file of
        `purpose` named `filename` (`_add_output`): never refused for its tenant's cap."""
        return await self._thread.call(self._add_output, tenant, filename, purpose, data, expires_after_s)

    async def get(self, tenant: str, file_id: str) -> StoredFile:
        """The tenant's file, else a 404."""
        return await self._thread.call(self._get, tenant, file_id)

    async def read(self, tenant: str, file_id: str) -> bytes:
        def read() -> bytes:
            self._get(tenant, file_id)
            return (self.root / file_id).read_bytes()
        return await self._thread.call(read)

    def path_of(self, stored: StoredFile) -> Path:
        return self.root / stored.id

    async def stored_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's live files (the cap's measure)."""
        return await self._thread.call(self._stored_bytes, tenant, named="count its stored bytes")

    async def delete(self, tenant: str, file_id: str) -> None:
        """Remove the tenant's live file, else a 404."""
        await self._thread.call(self._delete, tenant, file_id)

    async def list(self, tenant: str, purpose: str | None, page: ListPage) -> tuple[list[StoredFile], bool]:
        return await self._thread.call(self._list, tenant, purpose, page)

    def close(self) -> None:
        """Finish pending calls; remove a temporary directory."""
        self._thread.close(self._file.close)
        if self._temporary is not None:
            self._temporary.remove()

