"""The end of a batch: its output and error files written, then its final status; and
the check that a batch can go on (else it ends `failed`).

Invariant: every result is in exactly one of the two files before the batch takes its
final status and its results are dropped from the store (a result with no UTF-8 form is
written as its `unwritable_result` error: `written_form`); a batch ending `completed` with
requests never sent ends `expired` instead, each of those a `batch_expired` error line.
The files are written a result at a time, read from the batch's results file and spooled
to disk (`WrittenResults`): finishing never holds every result, nor a file's bytes, on the
heap (QA153: a finished batch's memory stayed with the process).
Each file is the batch's one file of its name (`FileStore.add_output`): a batch finished
again (a crash after its files, before its final status) makes no second copy.
Only a batch that ran its course (`FINALIZED`) is `finalizing` meanwhile: a cancelled one
is `cancelling` until it is `cancelled` (a second cancel meanwhile is answered, not a
400), as OpenAI's are.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import mmap
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cache.private_paths import make_private_dirs

from gateway.batch_input import BatchInput, BatchLine, open_input
from gateway.batch_lines import BatchRequest
from gateway.batch_store import Batch, BatchStore, request_result, succeeded, summed_usage, written_form
from gateway.errors import ApiError
from gateway.file_store import FileStore

log = logging.getLogger("stepahead.gateway")

FINALIZED = ("completed", "expired")   # the ends OpenAI's batches reach through `finalizing`


async def finish_batch(store: BatchStore, files: FileStore, batch: Batch, results: Iterable[dict] | None,
                       unsent: Sequence[BatchLine | BatchRequest], final: str, errors: list[dict] | None,
                       clock: Callable[[], float]) -> None:
    """Write the files of `results` (None: the batch's results in `store`, read a line at
    a time) and move `batch` to `final` ("completed", "cancelled" or "failed", with
    `errors` then); `unsent` are its requests without a result."""
    expired: Iterable[dict] = ()
    if unsent and final == "completed":   # the runner sends every request unless the window passed
        final = "expired"
        log.warning("batch %s expired with %d of its %d requests not sent", batch.id, len(unsent), batch.total)
        expired = map(_expired, unsent)
    if final in FINALIZED:   # a cancelled (or failed) batch stays as it was while its files are written
        batch.moved_to("finalizing", clock())
        await store.put(batch)
    kept = store.each_result(batch.id) if results is None else results
    # off the event loop: encoding a large batch's results took seconds, every tenant's requests waiting
    with await asyncio.to_thread(WrittenResults.of, itertools.chain(kept, expired), store.results_dir) as written:
        batch.output_file_id = await _results_file(files, batch, "output", written.output)
        batch.error_file_id = await _results_file(files, batch, "error", written.error)
    if errors is not None:
        batch.errors = errors
    batch.completed, batch.failed = written.num_completed, written.num_failed
    batch.usage = written.usage
    batch.moved_to(final, clock())
    await store.put(batch)
    await store.drop_results(batch.id)
    await store.drop_input(batch.id)   # its link to its input file (gateway/batch_input.py): it has ended


def _expired(request: BatchLine | BatchRequest) -> dict:
    return request_result(request.custom_id, None, None, "", {
        "code": "batch_expired", "message": "This request could not be executed before the completion window "
        "expired."})


class _Spool:
    """One of a batch's files being written: its lines appended to an unnamed temporary
    file beside the batch's results (on disk: /tmp may be memory), then (`done`) `data`, a
    read-only map of it for the file store to copy: its pages the kernel's, not the heap's."""

    def __init__(self, directory: Path) -> None:
        make_private_dirs(directory)
        self.file = tempfile.TemporaryFile(dir=directory)   # (0600, and gone with the process)
        self.data: bytes | memoryview = b""   # (b"" for nothing written: an empty file cannot be mapped)
        self._map: mmap.mmap | None = None

    def done(self) -> None:
        self.file.flush()
        if self.file.tell():
            self._map = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ)
            self.data = memoryview(self._map)

    def close(self) -> None:
        try:
            if isinstance(self.data, memoryview):
                self.data.release()   # (before its map: a map with a view on it cannot close)
                self._map.close()
        except BufferError:   # still being copied (the finish cancelled meanwhile): freed once it is not
            pass
        self.file.close()


@dataclass(slots=True)
class WrittenResults:
    """A batch's results as its two files hold them: the 2xx answers' lines (`output`),
    the others' (`error`; each as `written_form` makes it), how many of each, and the
    answers' summed usage. Made a result at a time (`of`): what it holds in memory does
    not grow with the results (QA153: a finished batch's RSS stayed high); the files'
    bytes are maps of its spools, on disk, until `close` (or the end of its `with`)."""

    spools: tuple[_Spool, _Spool]
    num_completed: int = 0
    num_failed: int = 0
    usage: dict | None = None

    @property
    def output(self) -> bytes | memoryview:
        return self.spools[0].data

    @property
    def error(self) -> bytes | memoryview:
        return self.spools[1].data

    @classmethod
    def of(cls, results: Iterable[dict], directory: Path) -> "WrittenResults":
        """`results` (read once, one at a time) written out, their spools in `directory`:
        disk I/O, off the event loop."""
        written = cls((_Spool(directory), _Spool(directory)))
        try:
            output, error = (spool.file for spool in written.spools)

            def answered() -> Iterator[dict]:
                for result in results:
                    result, line = written_form(result)   # as in the results file, or its error
                    if succeeded(result):
                        output.write(line)
                        written.num_completed += 1
                        yield result
                    else:
                        error.write(line)
                        written.num_failed += 1
            written.usage = summed_usage(answered())
            for spool in written.spools:
                spool.done()
        except BaseException:
            written.close()
            raise
        return written

    def close(self) -> None:
        for spool in self.spools:
            spool.close()

    def __enter__(self) -> "WrittenResults":
        return self

    def __exit__(self, *_) -> None:
        self.close()


async def _results_file(files: FileStore, batch: Batch, kind: str, data: bytes | memoryview) -> str | None:
    """The id of the batch's `batch_output` file of `data` (None, no file, when it is
    empty): named for the batch, so a batch finished again (its files written, then a
    crash before its final status) reuses the one written before, or replaces it."""
    stored = await files.add_output(batch.tenant, f"{batch.id}_{kind}.jsonl", "batch_output", data,
                                    batch.output_expires_after_s)
    return None if stored is None else stored.id


async def input_to_go_on(store: BatchStore, files: FileStore, batch: Batch, cancelled: bool,
                         clock: Callable[[], float]) -> BatchInput | None:
    """The input of a batch that starts after a wait or goes on (after a restart, or
    cancelled while not running), checked and held open (gateway/batch_input.py): read
    through its link to the file's bytes (`BatchStore.input_link`), so a file deleted since
    the batch was made is still read (QA206 F1), else (no link could be made) the file by
    its id; None when it cannot and has ended `failed`, with the files of what finished
    (its input file was deleted, or fails a check added since it began). A `cancelled` one
    needs no requests: it ends with what finished."""
    try:
        try:
            batch_input, errors = await asyncio.to_thread(BatchInput.opened, store.input_link(batch.id),
                                                          batch.endpoint)
        except FileNotFoundError:   # no link: the file by its id, while it is there
            batch_input, errors = await open_input(files, batch.tenant, batch.input_file_id, batch.endpoint)
    except ApiError as error:
        if error.status != 404:
            raise
        if cancelled:
            return BatchInput.empty()
        await _fail(store, files, batch, [{"code": "input_file_missing", "message": f"The input file "
                                           f"{batch.input_file_id} was deleted before the batch finished; its "
                                           "requests without a result cannot run.", "param": None, "line": None}],
                    clock)
        return None
    if errors and not cancelled:
        await _fail(store, files, batch, errors, clock)
        return None
    return batch_input


async def _fail(store: BatchStore, files: FileStore, batch: Batch, errors: list[dict],
                clock: Callable[[], float]) -> None:
    log.warning("batch %s failed: %s", batch.id, errors[0]["message"])
    await finish_batch(store, files, batch, None, [], "failed", errors, clock)
