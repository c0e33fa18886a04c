"""A running batch's input file: held open while the batch runs, with only each request's
place in it in memory (`BatchLine`: its custom_id, offset and length); a request's body is
read from the file and parsed again just before it is sent (`BatchInput.requests`).

Invariants:
- what a batch holds in memory while it runs does not grow with its requests' bodies: a
  few dozen bytes per line and its custom_id, and the bodies of the requests about to be
  sent (at most `chunks`' lines or bytes at a time); QA153: each running batch held its
  whole input parsed, 240-430 MiB for a 190 MiB file;
- the file is checked whole (gateway/batch_lines.py, through a read-only mmap: the bytes
  are not copied onto the heap) when the batch is created or goes on after a restart, and
  held open from then until the batch stops running here (`close`): a file deleted
  meanwhile is still read, as its bytes stay until the last descriptor closes, so the
  batch runs to its end as when it was held in memory;
- at its creation (`served` given), a batch whose lines name a model the gateway does not
  serve fails as a bad file does (`model_not_found`, at the first line naming it; QA153
  finding 5: every line was a 404 of its own), and one whose model cannot serve the batch's
  endpoint (`served` a mapping that says why: an embeddings batch on a chat model, a chat
  batch on an embedding model) fails the same way with the error each line would have got
  (`model_not_supported`; QA212 F4); a batch that goes on is not checked again,
  so a model gone since (a restart without it) answers each line's 404 as before;
- the requests read are those checked: a file's bytes never change (gateway/file_store.py);
  a line that no longer reads as its checked request raises `InputChanged`;
- a batch's input survives its file's deletion from the batch's creation, whether it runs
  at once or waits, and across a restart: the batch keeps a hard link to the file's bytes
  (`link_input`, at `BatchStore.input_link`), read when it starts or goes on, removed when
  it ends (gateway/batch_finish.py) or, for a batch that ended or has no record, at the
  next start (`remove_stale_links`); where a link cannot be made (another file system,
  one without hard links) the batch reads its file by id, as before (QA206 F1). A waiting
  batch holds no descriptor, only its link;
- opening, checking and reading are disk I/O: they run off the event loop.
"""
from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agents_trace.json_text import loads_standard
from cache.private_paths import make_private_dirs
from gateway.batch_lines import BatchRequest, checked_lines
from gateway.errors import model_not_found
from gateway.file_records import file_not_found
from gateway.file_store import FileStore

CHUNK_LINES = 64   # requests read at once, at least (`chunks`): 4 per request slot when more
CHUNK_BYTES = 4 << 20   # and at most this many bytes of lines, but one line at least


class InputChanged(Exception):
    """A line of a batch's input file no longer reads as the request checked there."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    """Where a checked request is in its batch's input file: `length` bytes from `offset`
    (without its line end)."""

    custom_id: str
    offset: int
    length: int


class BatchInput:
    """A checked input file, open (`file`, None for one with no lines), its `lines` in
    order and the `model` they name."""

    __slots__ = ("file", "lines", "model", "_reading", "_closing")

    def __init__(self, file, lines: list[BatchLine], model: str | None) -> None:
        self.file, self.lines, self.model = file, lines, model
        self._reading = threading.Lock()   # held by `requests`: `close` never pulls the file from under it
        self._closing = False

    @classmethod
    def empty(cls) -> "BatchInput":
        return cls(None, [], None)

    @property
    def path(self) -> Path | None:
        """Where the file was opened (None for an `empty` input), open or closed."""
        return None if self.file is None else Path(self.file.name)

    @classmethod
    def opened(cls, path: Path, endpoint: str, served: Collection[str] | None = None
               ) -> tuple["BatchInput", list[dict]]:
        """The file at `path` checked for a batch of `endpoint` (and, with `served`, for a
        model among them, and, where `served` maps each model to why it cannot serve
        `endpoint` (None where it can), for one that can) and held open, and []; (an
        `empty` input, its errors) for a bad file. FileNotFoundError when there is none."""
        file = open(path, "rb", buffering=0)
        try:
            models: list[tuple[str, int]] = []   # the first good request's model, and its line's offset

            def keep(offset: int, length: int, request: BatchRequest) -> BatchLine:
                if not models:
                    models.append((request.body["model"], offset))
                return BatchLine(request.custom_id, offset, length)
            size = os.fstat(file.fileno()).st_size
            # (an empty file cannot be mapped)
            with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) if size else contextlib.nullcontext(b"") \
                    as data:
                lines, errors = checked_lines(data, endpoint, keep)
                # a file whose only fault is its models: the first line's unserved model is told there,
                # not as the model the next lines should have named (QA217 F4)
                if served is not None and models and all(e["code"] == "mismatched_model" for e in errors) \
                        and (not errors or models[0][0] not in served):
                    errors = _model_errors(models[0][0], data[:models[0][1]].count(b"\n") + 1, served)
        except BaseException:
            file.close()
            raise
        if errors:
            file.close()
            return cls.empty(), errors
        return cls(file, lines, models[0][0]), []

    def chunks(self, lines: Sequence[BatchLine], most_lines: int) -> Iterator[Sequence[BatchLine]]:
        """`lines` in runs of at most `most_lines` lines and `CHUNK_BYTES` bytes (one line
        at least), in order."""
        start = 0
        while start < len(lines):
            end, size = start + 1, lines[start].length
            while end < len(lines) and end - start < most_lines and size + lines[end].length <= CHUNK_BYTES:
                size += lines[end].length
                end += 1
            yield lines[start:end]
            start = end

    def requests(self, lines: Sequence[BatchLine]) -> list[BatchRequest]:
        """The requests of `lines`, read from the file now (disk I/O: off the event loop)."""
        try:
            with self._reading:
                return [self._request(line) for line in lines]
        finally:
            self._close_if_asked()

    def _request(self, line: BatchLine) -> BatchRequest:
        raw = os.pread(self.file.fileno(), line.length, line.offset)   # (a closed file: ValueError)
        try:
            request = loads_standard(raw)
        except (ValueError, RecursionError) as exc:
            raise InputChanged(f"the line of {line.custom_id!r} no longer parses: {exc}") from None
        if not isinstance(request, dict) or request.get("custom_id") != line.custom_id \
                or not isinstance(request.get("body"), dict):
            raise InputChanged(f"the line of {line.custom_id!r} is no longer the request checked there")
        return BatchRequest(line.custom_id, request["body"])

    def close(self) -> None:
        """Close the file, now or (while `requests` reads it, in another thread) when that
        read ends: never waits, so it may be called on the event loop."""
        if self.file is not None:
            self._closing = True
            self._close_if_asked()

    def _close_if_asked(self) -> None:
        """(Each of `close` and `requests` tries after the other could have: one closes it.)"""
        if self._closing and self._reading.acquire(blocking=False):
            try:
                self.file.close()
            finally:
                self._reading.release()


def _model_errors(model: str, line: int, served: Collection[str]) -> list[dict]:
    """The file errors of a good file whose requests all name `model` (`line` the first
    naming it, its first line not blank): none when `served` holds it and (`served` a
    mapping) says no reason it cannot serve the batch's endpoint."""
    if model not in served:
        return [unserved_model(model, line, served)]
    why = served[model] if isinstance(served, Mapping) else None
    return [] if why is None else [{"code": "model_not_supported", "message": why, "param": "body.model", "line": line}]


def unserved_model(model: str, line: int, served: Collection[str]) -> dict:
    """The file error of a batch whose requests name `model`, which the gateway does not
    serve (`line` the first naming it), shaped as the other file errors and worded as a
    request's own 404 (gateway/errors.py)."""
    return {"code": "model_not_found", "message": model_not_found(model, sorted(served)).message,
            "param": "body.model", "line": line}


def link_input(source: Path, link: Path) -> bool:
    """Make `link` a hard link to the file at `source`, so its bytes outlive the file's
    deletion; False, and nothing made, where that cannot be (EXDEV, EPERM, the file gone
    already, ...): the batch then reads its file by id. Disk I/O: off the event loop."""
    try:
        make_private_dirs(link.parent)
        link.unlink(missing_ok=True)   # (a batch's id names one link: never another batch's)
        os.link(source, link)
    except OSError:
        return False
    return True


def drop_link(link: Path) -> None:
    """Remove `link` (`link_input`) if there is one; one that cannot be is left to the next
    start's `remove_stale_links`."""
    try:
        link.unlink(missing_ok=True)
    except OSError:
        pass


def remove_stale_links(directory: Path, going_on: Callable[[], Collection[str]]) -> None:
    """Remove the links in `directory` (`link_input`: named for their batches) of batches
    not among `going_on()` (those not ended), read after the links are listed: a link made
    meanwhile is of a batch recorded before, so it is kept."""
    if not directory.is_dir():
        return
    links = [path for path in directory.iterdir() if path.is_file()]
    kept = set(going_on())
    for link in links:
        if link.name not in kept:
            link.unlink(missing_ok=True)


async def open_input(files: FileStore, tenant: str, file_id: str, endpoint: str,
                     served: Collection[str] | None = None) -> tuple[BatchInput, list[dict]]:
    """The tenant's file checked for a batch (with `served`, the models its lines may
    name) and held open (`BatchInput.opened`); a 404 when it is not (or no longer) there."""
    stored = await files.get(tenant, file_id)
    try:
        return await asyncio.to_thread(lambda: BatchInput.opened(files.path_of(stored), endpoint, served))
    except FileNotFoundError:   # deleted since its record was read
        raise file_not_found(file_id) from None
