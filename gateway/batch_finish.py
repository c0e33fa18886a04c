"""The end of a batch: its output and error files written, then its final status.

Invariant: every result is in exactly one of the two files before the batch takes its
final status and its results are dropped from the store (a result with no UTF-8 form is
written as its `unwritable_result` error: `written_form`); a batch ending `completed` with
requests never sent ends `expired` instead, each of those a `batch_expired` error line.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.batch_lines import BatchRequest
from gateway.batch_store import Batch, BatchStore, request_result, succeeded, summed_usage, written_form
from gateway.file_store import FileStore

log = logging.getLogger("stepahead.gateway")


async def finish_batch(store: BatchStore, files: FileStore, batch: Batch, results: list[dict],
                       unsent: list[BatchRequest], final: str, errors: list[dict] | None,
                       clock: Callable[[], float]) -> None:
    """Write the files of `results` and move `batch` to `final` ("completed", "cancelled"
    or "failed", with `errors` then); `unsent` are its requests without a result."""
    if unsent and final == "completed":   # the runner sends every request unless the window passed
        final = "expired"
        log.warning("batch %s expired with %d of its %d requests not sent", batch.id, len(unsent), batch.total)
        results = results + [request_result(request.custom_id, None, None, "", {
            "code": "batch_expired", "message": "This request could not be executed before the completion window "
            "expired."}) for request in unsent]
    batch.moved_to("finalizing", clock())
    await store.put(batch)
    written = [written_form(result) for result in results]   # as in the results file, or its error
    answered = [result for result, _ in written if succeeded(result)]
    batch.output_file_id = await _results_file(files, batch, "output", [
        line for result, line in written if succeeded(result)])
    batch.error_file_id = await _results_file(files, batch, "error", [
        line for result, line in written if not succeeded(result)])
    if errors is not None:
        batch.errors = errors
    batch.completed, batch.failed = len(answered), len(written) - len(answered)
    batch.usage = summed_usage(answered)
    batch.moved_to(final, clock())
    await store.put(batch)
    await store.drop_results(batch.id)


async def _results_file(files: FileStore, batch: Batch, kind: str, lines: list[bytes]) -> str | None:
    """The id of a new `batch_output` file of `lines`; None (no file) without lines."""
    if not lines:
        return None
    return (await files.add_bytes(batch.tenant, f"{batch.id}_{kind}.jsonl", "batch_output", b"".join(lines),
                                  batch.output_expires_after_s)).id
