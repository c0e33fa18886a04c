"""The end of a batch: its output and error files written, then its final status; and
the check that a batch can go on (else it ends `failed`).

Invariant: every result is in exactly one of the two files before the batch takes its
final status and its results are dropped from the store (a result with no UTF-8 form is
written as its `unwritable_result` error: `written_form`); a batch ending `completed` with
requests never sent ends `expired` instead, each of those a `batch_expired` error line.
Each file is the batch's one file of its name (`FileStore.add_output`): a batch finished
again (a crash after its files, before its final status) makes no second copy.
Only a batch that ran its course (`FINALIZED`) is `finalizing` meanwhile: a cancelled one
is `cancelling` until it is `cancelled` (a second cancel meanwhile is answered, not a
400), as OpenAI's are.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.batch_input import BatchInput, BatchLine, open_input
from gateway.batch_lines import BatchRequest
from gateway.batch_store import Batch, BatchStore, request_result, succeeded, summed_usage, written_form
from gateway.errors import ApiError
from gateway.file_store import FileStore

log = logging.getLogger("stepahead.gateway")

FINALIZED = ("completed", "expired")   # the ends OpenAI's batches reach through `finalizing`


async def finish_batch(store: BatchStore, files: FileStore, batch: Batch, results: list[dict],
                       unsent: Sequence[BatchLine | BatchRequest], final: str, errors: list[dict] | None,
                       clock: Callable[[], float]) -> None:
    """Write the files of `results` and move `batch` to `final` ("completed", "cancelled"
    or "failed", with `errors` then); `unsent` are its requests without a result."""
    if unsent and final == "completed":   # the runner sends every request unless the window passed
        final = "expired"
        log.warning("batch %s expired with %d of its %d requests not sent", batch.id, len(unsent), batch.total)
        results = results + [request_result(request.custom_id, None, None, "", {
            "code": "batch_expired", "message": "This request could not be executed before the completion window "
            "expired."}) for request in unsent]
    if final in FINALIZED:   # a cancelled (or failed) batch stays as it was while its files are written
        batch.moved_to("finalizing", clock())
        await store.put(batch)
    # off the event loop: encoding a large batch's results took seconds, every tenant's requests waiting
    written = await asyncio.to_thread(WrittenResults.of, results)
    batch.output_file_id = await _results_file(files, batch, "output", written.output)
    batch.error_file_id = await _results_file(files, batch, "error", written.error)
    if errors is not None:
        batch.errors = errors
    batch.completed, batch.failed = written.num_completed, written.num_failed
    batch.usage = written.usage
    batch.moved_to(final, clock())
    await store.put(batch)
    await store.drop_results(batch.id)


@dataclass(frozen=True, slots=True)
class WrittenResults:
    """A batch's results as its two files hold them: the 2xx answers' lines, the others'
    (each as `written_form` makes it), how many of each, and the answers' summed usage."""

    output: bytes
    error: bytes
    num_completed: int
    num_failed: int
    usage: dict

    @classmethod
    def of(cls, results: list[dict]) -> "WrittenResults":
        written = [written_form(result) for result in results]   # as in the results file, or its error
        answered = [result for result, _ in written if succeeded(result)]
        return cls(b"".join(line for result, line in written if succeeded(result)),
                   b"".join(line for result, line in written if not succeeded(result)),
                   len(answered), len(written) - len(answered), summed_usage(answered))


async def _results_file(files: FileStore, batch: Batch, kind: str, data: bytes) -> str | None:
    """The id of the batch's `batch_output` file of `data` (None, no file, when it is
    empty): named for the batch, so a batch finished again (its files written, then a
    crash before its final status) reuses the one written before, or replaces it."""
    stored = await files.add_output(batch.tenant, f"{batch.id}_{kind}.jsonl", "batch_output", data,
                                    batch.output_expires_after_s)
    return None if stored is None else stored.id


async def input_to_go_on(store: BatchStore, files: FileStore, batch: Batch, cancelled: bool,
                         clock: Callable[[], float]) -> BatchInput | None:
    """The input of a batch that goes on (after a restart, or cancelled while not
    running), checked and held open (gateway/batch_input.py); None when it cannot and has
    ended `failed`, with the files of what finished (its input file was deleted, or fails a
    check added since it began). A `cancelled` one needs no requests: it ends with what
    finished."""
    try:
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
    await finish_batch(store, files, batch, await store.results(batch.id), [], "failed", errors, clock)
