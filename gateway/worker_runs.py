"""The workers one engine request ran on: its first, and the one a mid-stream resume moved it to.

A request whose worker died mid-stream goes on from its last token sent on another worker
(shards/dispatcher.py, `WorkItem.resumed`). Its prompt, the prefix found cached and its
first token are the first worker's; the tokens it generated, each worker's own. A worker's
first `TokenEvent` of a request names it (shards/protocol.py), so `WorkerRuns` follows the
runs from the request's events as they are read, and its metrics and trace credit each
worker with what it did (gateway/local_generation.py). No I/O.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WorkerRun:
    """One worker's part of a request: the output tokens it generated (read from it)."""

    worker: str
    num_output_tokens: int = 0


class WorkerRuns:
    """The runs of one engine request, in order. Invariant: every token read after a
    worker's first event counts in that worker's run (none is read before the first)."""

    def __init__(self) -> None:
        self.runs: list[WorkerRun] = []

    def on_tokens(self, worker_id: str | None, num_tokens: int) -> None:
        """A `TokenEvent`'s tokens; `worker_id` set in a worker's first event of the request."""
        if worker_id is not None:
            self.runs.append(WorkerRun(worker_id))
        if self.runs:
            self.runs[-1].num_output_tokens += num_tokens

    @property
    def first_worker(self) -> str | None:
        """The worker that prefilled the prompt and sent the first token (None before any)."""
        return self.runs[0].worker if self.runs else None

    def resumed(self, num_output_tokens: int) -> tuple[WorkerRun, ...]:
        """A request that ran on several workers: its runs, the last one's count the rest
        of `num_output_tokens` (what its finish counted: tokens of the earlier runs included);
        () for a request that ran on one worker."""
        if len(self.runs) < 2:
            return ()
        earlier = self.runs[:-1]
        num_rest = max(0, num_output_tokens - sum(run.num_output_tokens for run in earlier))
        return (*(WorkerRun(run.worker, run.num_output_tokens) for run in earlier),
                WorkerRun(self.runs[-1].worker, num_rest))
