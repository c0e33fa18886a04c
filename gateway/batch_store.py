"""Batches of the Batch API: their records in SQLite, the results of their requests in a
JSON-lines file each, as they finish, so a restarted gateway goes on where it stopped.

Invariants:
- a batch is found only by the tenant that made it (another tenant's ids read as unknown);
- a request's result is appended once it is known, and read back whole: after a restart
  the requests with a result are not sent again; a line cut short (the process died
  while writing it) reads as no result, and the next result still starts a line of its own;
- every result written is one line of JSON in UTF-8 (`written_form`): a result that has
  no such form is written as that request's error result, so no one request's result can
  stop its batch;
- a tenant's batches are listed in the order they were made (`seq`, rising per tenant,
  kept when a batch's record is rewritten), newest first by default;
- a batch's results are read back a line at a time (`each_result`), never its whole file
  nor every result at once: a running batch reads only their custom_ids and counts
  (`progress`), its end streams them into its files (gateway/batch_finish.py);
- the event loop never touches the disk: every call runs on the store's one thread, in
  the order made (but a finished batch's `each_result`, read on its finisher's thread);
  with `root` None everything is kept in memory and a temporary directory (made on first
  use, removed at `close()`), lost at a restart;
- a batch whose record this version cannot read (gateway/batch_record.py: no JSON object,
  a key missing, a value of another type; a key it does not know is no fault, and is kept)
  is answered as absent: a 404, left out of lists, not run (so not rewritten: a newer
  version sharing the index still has it as it wrote it), with one warning (QA196 F1);
- an unfinished batch may hold a hard link to its input file's bytes (`input_link`,
  gateway/batch_input.py), removed when it ends (`drop_input`) and, at the start, for a
  batch that ended or has no record (QA206 F1);
- an index found damaged is set aside and a new one started: the results of the batches
  it recorded go to `batch_results/orphaned-<its UTC time>/` then, or at the next start,
  each under its batch's claim (never one a runner runs), with one warning
  (`gateway.unrecorded_files.set_aside_unrecorded` says which; the sweeps: gateway/batch_index.py).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from cache.private_paths import make_private_dirs, private_opener
from gateway.batch_index import ADDED_COLUMNS, SCHEMA, BatchIndexSweeps
from gateway.batch_input import drop_link, link_input, remove_stale_links
from gateway.batch_overwrite import KEPT_OVER, STATUS
from gateway.batch_record import UNFINISHED, Batch, read_record, record_text
from gateway.errors import ApiError
from gateway.tenant_seq import next_seq, number_unnumbered
from gateway.ids import random_hex
from gateway.list_page import ListPage
from gateway.openai_format import line_breaks_escaped
from gateway.unrecorded_files import SweptIndex
from gateway.store_thread import StoreThread, TemporaryRoot


log = logging.getLogger("stepahead.gateway")


def batch_not_found(batch_id: str) -> ApiError:
    return ApiError(404, f"No batch found with id '{batch_id}'.", "invalid_request_error", "not_found", "batch_id")


def request_result(custom_id: str, status: int | None, body: object, request_id: str, error: dict | None) -> dict:
    """One request's line of a batch's output or error file, as OpenAI writes it."""
    return {"id": f"batch_req_{random_hex(32)}", "custom_id": custom_id,
            "response": None if status is None else {"status_code": status, "request_id": request_id, "body": body},
            "error": error}


def written_form(result: dict) -> tuple[dict, bytes]:
    """`result` as written: itself and its JSON line in UTF-8 (with the characters other
    readers take for line breaks escaped), or, when it has none (a string with an unpaired
    surrogate, a number past what JSON holds), that request's `unwritable_result` error
    and its line (ASCII: any `custom_id` can be escaped)."""
    try:
        return result, (line_breaks_escaped(json.dumps(result, ensure_ascii=False)) + "\n").encode()
    except (ValueError, TypeError, RecursionError) as exc:   # UnicodeEncodeError is a ValueError
        error = request_result(result.get("custom_id"), None, None, "", {
            "code": "unwritable_result", "message": f"This request's result could not be written as JSON in UTF-8 "
            f"({type(exc).__name__}); it is not kept."})
        return error, (json.dumps(error) + "\n").encode()


def succeeded(result: dict) -> bool:
    """Whether a request's result is a 2xx answer (its line goes to the output file)."""
    return result["response"] is not None and 200 <= result["response"]["status_code"] < 300


def _count(value: object) -> int:
    """A token count as an answer gives it; anything but a whole number (an upstream's
    null, string or float) counts 0, so no one answer can stop its batch's finish."""
    return value if type(value) is int and value >= 0 else 0


def summed_usage(results: Iterable[dict]) -> dict:
    """The token usage of `results` as the Batch API reports it, from each body's own
    (`prompt_tokens` / `completion_tokens`, or the Responses API's `input_tokens` /
    `output_tokens`), read once (`results` may be a generator)."""
    total = {"input": 0, "output": 0, "cached": 0}
    for result in results:
        usage = result["response"]["body"].get("usage") if isinstance(result["response"]["body"], dict) else None
        if not isinstance(usage, dict):
            continue
        total["input"] += _count(usage.get("prompt_tokens", usage.get("input_tokens")))
        total["output"] += _count(usage.get("completion_tokens", usage.get("output_tokens")))
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        total["cached"] += _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return {"input_tokens": total["input"], "input_tokens_details": {"cached_tokens": total["cached"]},
            "output_tokens": total["output"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total["input"] + total["output"]}


class BatchStore(BatchIndexSweeps):
    def __init__(self, root: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._root = root
        self._temporary = TemporaryRoot("stepahead-batches-") if root is None else None
        self.clock = clock
        # NOTE: rows of the first version were rewritten with INSERT OR REPLACE (a new rowid
        # each time): `created_at, id` is their best guess of creation order
        self._file = SweptIndex(None if root is None else root / "batches.sqlite3", "the batch index", SCHEMA,
                                ADDED_COLUMNS, migrate=lambda db: number_unnumbered(db, "batches", "created_at, id"),
                                after_set_aside=self._set_aside_unrecorded)
        self._thread = StoreThread("stepahead-batches", "the batch store")
        self._told_unreadable: set[tuple[str, str, str]] = set()   # (tenant, id, why) warned of, on the thread
        if root is not None:   # first on the thread: before any batch of this store runs
            self._thread.submit(self._sweep_unrecorded)
            self._thread.submit(lambda: remove_stale_links(self.results_dir.parent / "batch_inputs", self._going_on))

    @property
    def results_dir(self) -> Path:
        return (self._root if self._temporary is None else self._temporary.path) / "batch_results"

    def input_link(self, batch_id: str) -> Path:
        """Where the batch's link to its input file is, while it has one (`keep_input`)."""
        return self.results_dir.parent / "batch_inputs" / batch_id

    def _going_on(self) -> set[str]:
        """The ids of the batches not ended (one whose record holds no status included)."""
        marks = ", ".join("?" * len(UNFINISHED))
        return {batch_id for (batch_id,) in self._file.rows(
            f"SELECT id FROM batches WHERE COALESCE({STATUS.format('record')}, 'validating') IN ({marks})", UNFINISHED)}

    def _put(self, batch: Batch) -> Batch | None:
        """Keep `batch` (`KEPT_OVER`: a cancel made by a gateway sharing this store stands);
        returns the record as kept now (None: unreadable), where its runner sees such a cancel."""
        self._file.change("INSERT INTO batches (tenant, id, created_at, record, seq) VALUES (?, ?, ?, ?, "
                          f"{next_seq('batches')}) ON CONFLICT (tenant, id) DO UPDATE SET {KEPT_OVER}",
                          (batch.tenant, batch.id, batch.created_at, record_text(batch), batch.tenant))
        rows = self._file.rows("SELECT record FROM batches WHERE tenant = ? AND id = ?", (batch.tenant, batch.id))
        return self._read(batch.tenant, batch.id, rows[0][0]) if rows else None

    def _read(self, tenant: str, batch_id: str, record: object) -> Batch | None:
        """The batch `record` holds; None when it is unreadable (gateway/batch_record.py): it
        is then answered as absent, and not run, with one warning for each such record."""
        batch = read_record(record)
        if isinstance(batch, Batch) and (batch.tenant, batch.id) == (tenant, batch_id):
            return batch
        why = batch if isinstance(batch, str) else "it names another batch"
        if (tenant, batch_id, why) not in self._told_unreadable:
            self._told_unreadable.add((tenant, batch_id, why))
            log.warning("stepahead: warning: %s %s holds a record this version cannot read (batch %s of tenant %r: "
                        "%s; a damaged record, or a newer version's): it is answered as absent and not run",
                        self._file.what, self._file.path or "(in memory)", batch_id, tenant, why)
        return None

    def _row(self, tenant: str, batch_id: str) -> tuple[int, Batch | None]:
        """The batch's place in its tenant's order (`seq`), and the batch (None: unreadable);
        not found when there is no record of it."""
        rows = self._file.rows("SELECT seq, record FROM batches WHERE tenant = ? AND id = ?", (tenant, batch_id))
        if not rows:
            raise batch_not_found(batch_id)
        return rows[0][0], self._read(tenant, batch_id, rows[0][1])

    def _get(self, tenant: str, batch_id: str) -> Batch:
        batch = self._row(tenant, batch_id)[1]
        if batch is None:
            raise batch_not_found(batch_id)
        return batch

    def _list(self, tenant: str, page: ListPage) -> tuple[list[Batch], bool]:
        """A page of the tenant's readable batches; the unreadable are passed over (a page
        then reads on past them), and an `after` naming one still pages on from it."""
        order = "ASC" if page.order == "asc" else "DESC"
        seq_from = None
        if page.after is not None:
            try:
                seq_from = self._row(tenant, page.after)[0]
            except ApiError:
                raise page.unknown_after("batch") from None
        found: list[Batch] = []
        while len(found) <= page.limit:
            where = "tenant = ?" if seq_from is None else f"tenant = ? AND seq {'>' if order == 'ASC' else '<'} ?"
            rows = self._file.rows(f"SELECT seq, id, record FROM batches WHERE {where} ORDER BY seq {order} LIMIT ?",
                                   (tenant, *(() if seq_from is None else (seq_from,)), page.limit + 1))
            found += filter(None, (self._read(tenant, batch_id, record) for _, batch_id, record in rows))
            if len(rows) <= page.limit:
                break
            seq_from = rows[-1][0]
        return found[:page.limit], len(found) > page.limit

    def _unfinished(self) -> list[Batch]:
        """The batches not ended, oldest first; the finished ones are not read (a gateway's
        runner looks every 30 s, and a store keeps every batch ever made); nor the unreadable."""
        marks = ", ".join("?" * len(UNFINISHED))
        rows = self._file.rows(f"SELECT tenant, id, record FROM batches WHERE {STATUS.format('record')} IN ({marks}) "
                               "ORDER BY created_at, seq", UNFINISHED)
        return list(filter(None, (self._read(tenant, batch_id, record) for tenant, batch_id, record in rows)))

    def _append_results(self, batch_id: str, results: list[dict]) -> list[dict]:
        kept, lines = zip(*map(written_form, results)) if results else ((), ())
        make_private_dirs(self.results_dir)
        with open(self.results_dir / f"{batch_id}.jsonl", "a+b", opener=private_opener) as out:
            if out.seek(0, os.SEEK_END) > 0:
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":   # a line cut short: ended here, so the next line stays whole
                    out.write(b"\n")
            out.write(b"".join(lines))
        return list(kept)

    def each_result(self, batch_id: str) -> Iterator[dict]:
        """The results appended so far, in order, read from the file a line at a time (never
        all at once; QA153: a finished batch's memory); a line cut short (the process died
        while writing it) is left out, even mid-character: its request runs again. NOTE:
        split at "\n" alone (a binary file's lines): JSON leaves U+2028 and U+0085
        unescaped, and str.splitlines splits at them. Disk I/O on the caller's thread: on the
        store's, or (`finish_batch`) on another once no result of the batch is appended any more."""
        try:
            results = open(self.results_dir / f"{batch_id}.jsonl", "rb")
        except FileNotFoundError:
            return
        with results:
            for line in results:
                try:
                    result = json.loads(line)
                except ValueError:   # UnicodeDecodeError too
                    continue
                if isinstance(result, dict) and "custom_id" in result:
                    yield result

    def _results(self, batch_id: str) -> list[dict]:
        return list(self.each_result(batch_id))

    def _progress(self, batch_id: str) -> tuple[set[str], int, int]:
        done, num_completed, num_failed = set(), 0, 0
        for result in self.each_result(batch_id):
            done.add(result["custom_id"])
            if succeeded(result):
                num_completed += 1
            else:
                num_failed += 1
        return done, num_completed, num_failed

    def _drop_results(self, batch_id: str) -> None:
        (self.results_dir / f"{batch_id}.jsonl").unlink(missing_ok=True)

    async def put(self, batch: Batch) -> Batch | None:
        """Keep `batch`; the record as kept now (a cancel another gateway made stands: `_put`)."""
        return await self._thread.call(self._put, batch)

    async def get(self, tenant: str, batch_id: str) -> Batch:
        return await self._thread.call(self._get, tenant, batch_id)

    async def list(self, tenant: str, page: ListPage) -> tuple[list[Batch], bool]:
        return await self._thread.call(self._list, tenant, page)

    async def unfinished(self) -> list[Batch]:
        return await self._thread.call(self._unfinished, named="read the unfinished batches")

    async def append_results(self, batch_id: str, results: list[dict]) -> list[dict]:
        """Append `results`; returns them as written (`written_form`)."""
        return await self._thread.call(self._append_results, batch_id, results)

    async def results(self, batch_id: str) -> list[dict]:
        return await self._thread.call(self._results, batch_id, named="read a batch's results")

    async def progress(self, batch_id: str) -> tuple[set[str], int, int]:
        """The custom_ids of the batch's results so far, and how many are 2xx answers and
        how many not: what a running batch needs of them, not the results themselves."""
        return await self._thread.call(self._progress, batch_id, named="read a batch's results")

    async def drop_results(self, batch_id: str) -> None:
        await self._thread.call(self._drop_results, batch_id)

    async def keep_input(self, batch_id: str, source: Path) -> bool:
        """Link the batch's input file (at `source`) to `input_link`, after its record is put;
        False where a link cannot be made (it then reads its file by id)."""
        return await self._thread.call(link_input, source, self.input_link(batch_id), named="keep a batch's input")

    async def drop_input(self, batch_id: str) -> None:
        """Remove the ended batch's input link (one that cannot be, the next start removes)."""
        await self._thread.call(drop_link, self.input_link(batch_id), named="drop a batch's input")

    def close(self) -> None:
        self._thread.close(self._file.close)
        if self._temporary is not None:
            self._temporary.remove()
