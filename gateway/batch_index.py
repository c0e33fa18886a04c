"""The batch store's index (`gateway/batch_store.py`): its schema, and what the store does
with the results directory at the start and when the index is set aside as damaged (a
mixin of `BatchStore`, whose invariants these keep).

Invariants: the start's sweep runs first on the store's thread, before any batch of the
store runs: once the index there was opened (one that is no database is set aside then),
the result files of the batches a damaged index took the records of are moved to
`batch_results/orphaned-<its UTC time>/`, each under its batch's claim, so never one a
runner runs (gateway/batch_claims.py); a file is moved, never removed
(`gateway.unrecorded_files`).
"""
from __future__ import annotations

from gateway.unrecorded_files import move_unrecorded, moved_under_claim

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    record TEXT NOT NULL,
    seq INTEGER,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS batches_by_time ON batches (tenant, created_at);
"""
ADDED_COLUMNS = (("batches", "seq", "INTEGER"),)   # not in the first version's batches


class BatchIndexSweeps:
    """Uses `BatchStore`'s `results_dir` and `_file` (its `SweptIndex`)."""

    __slots__ = ()

    def _sweep_unrecorded(self) -> None:
        """At start: `_set_aside_unrecorded`, once an index there is was opened (and set aside if no database)."""
        if self._file.path is not None and self._file.path.exists():
            self._file.rows("SELECT 1 FROM batches LIMIT 1")
        self._set_aside_unrecorded()

    def _set_aside_unrecorded(self) -> None:
        """Move the results of the batches the newest damaged index took the records of to
        `batch_results/orphaned-<its UTC time>/`, each under its claim (gateway/batch_claims.py)."""
        if self.results_dir.is_dir():
            move_unrecorded(self._file, "batches", {path.stem: path for path in self.results_dir.glob("*.jsonl")},
                            self.results_dir, "batch result file(s)",
                            moved_under_claim(self.results_dir.parent / "batch_claims"))
