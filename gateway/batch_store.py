"""Batches of the Batch API: their records in SQLite, the results of their requests in a
JSON-lines file each, as they finish, so a restarted gateway goes on where it stopped.

Invariants:
- a batch is found only by the tenant that made it (another tenant's ids read as unknown);
- a request's result is appended once it is known, and read back whole: after a restart
  the requests with a result are not sent again;
- the event loop never touches the disk: every call runs on the store's one thread, in
  the order made; with `root` None everything is kept in memory and a temporary
  directory (made on first use, removed at `close()`), lost at a restart.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cache.sqlite_file import SqliteFile
from gateway.errors import ApiError
from gateway.list_page import ListPage
from gateway.store_thread import StoreThread, TemporaryRoot

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS batches_by_time ON batches (tenant, created_at);
"""
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
TIMES = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
         "cancelled_at")


def batch_not_found(batch_id: str) -> ApiError:
    return ApiError(404, f"No batch found with id '{batch_id}'.", "invalid_request_error", "not_found", "batch_id")


@dataclass(slots=True)
class Batch:
    """A batch as it stands; `as_object()` is OpenAI's batch object."""

    id: str
    tenant: str
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    times: dict[str, int] = field(default_factory=dict)   # TIMES reached so far
    model: str | None = None   # the model its requests name (the first request's)
    usage: dict | None = None   # its requests' token usage, summed once it ends
    output_expires_after_s: int | None = None   # its output and error files', from their making

    def moved_to(self, status: str, now_s: float) -> None:
        self.status = status
        if f"{status}_at" in TIMES:   # every status but "validating" has its time
            self.times[f"{status}_at"] = int(now_s)

    def as_object(self) -> dict:
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint,
                "errors": None if self.errors is None else {"object": "list", "data": self.errors},
                "input_file_id": self.input_file_id, "completion_window": self.completion_window,
                "status": self.status, "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "created_at": self.created_at, "expires_at": self.expires_at,
                **{name: self.times.get(name) for name in TIMES},
                "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
                "metadata": self.metadata, "model": self.model, "usage": self.usage}


class BatchStore:
    def __init__(self, root: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._root = root
        self._temporary = TemporaryRoot("stepahead-batches-") if root is None else None
        self.clock = clock
        self._file = SqliteFile(None if root is None else root / "batches.sqlite3", "the batch index", SCHEMA)
        self._thread = StoreThread("stepahead-batches", "the batch store")

    @property
    def results_dir(self) -> Path:
        return (self._root if self._temporary is None else self._temporary.path) / "batch_results"

    def _put(self, batch: Batch) -> None:
        self._file.change("INSERT OR REPLACE INTO batches (tenant, id, created_at, record) VALUES (?, ?, ?, ?)",
                          (batch.tenant, batch.id, batch.created_at, json.dumps(asdict(batch), ensure_ascii=False)))

    def _get(self, tenant: str, batch_id: str) -> Batch:
        rows = self._file.rows("SELECT record FROM batches WHERE tenant = ? AND id = ?", (tenant, batch_id))
        if not rows:
            raise batch_not_found(batch_id)
        return Batch(**json.loads(rows[0][0]))

    def _list(self, tenant: str, page: ListPage) -> tuple[list[Batch], bool]:
        where, args = "tenant = ?", [tenant]
        if page.after is not None:
            try:
                after = self._get(tenant, page.after)
            except ApiError:
                raise page.unknown_after("batch") from None
            where += " AND (created_at, id) < (?, ?)"
            args += [after.created_at, after.id]
        rows = self._file.rows(f"SELECT record FROM batches WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ?",
                               (*args, page.limit + 1))
        return [Batch(**json.loads(row[0])) for row in rows[:page.limit]], len(rows) > page.limit

    def _unfinished(self) -> list[Batch]:
        rows = self._file.rows("SELECT record FROM batches ORDER BY created_at")
        return [batch for batch in (Batch(**json.loads(row[0])) for row in rows) if batch.status in UNFINISHED]

    def _append_results(self, batch_id: str, results: list[dict]) -> None:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        with open(self.results_dir / f"{batch_id}.jsonl", "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(result, ensure_ascii=False) + "\n" for result in results))

    def _results(self, batch_id: str) -> list[dict]:
        """The results appended so far; a last line cut short (the process died while
        writing it) is left out: its request runs again."""
        path = self.results_dir / f"{batch_id}.jsonl"
        if not path.exists():
            return []
        results = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                results.append(json.loads(line))
            except ValueError:
                continue
        return results

    def _drop_results(self, batch_id: str) -> None:
        (self.results_dir / f"{batch_id}.jsonl").unlink(missing_ok=True)

    async def put(self, batch: Batch) -> None:
        await self._thread.call(self._put, batch)

    async def get(self, tenant: str, batch_id: str) -> Batch:
        return await self._thread.call(self._get, tenant, batch_id)

    async def list(self, tenant: str, page: ListPage) -> tuple[list[Batch], bool]:
        return await self._thread.call(self._list, tenant, page)

    async def unfinished(self) -> list[Batch]:
        return await self._thread.call(self._unfinished)

    async def append_results(self, batch_id: str, results: list[dict]) -> None:
        await self._thread.call(self._append_results, batch_id, results)

    async def results(self, batch_id: str) -> list[dict]:
        return await self._thread.call(self._results, batch_id)

    async def drop_results(self, batch_id: str) -> None:
        await self._thread.call(self._drop_results, batch_id)

    def close(self) -> None:
        self._thread.close(self._file.close)
        if self._temporary is not None:
            self._temporary.remove()
