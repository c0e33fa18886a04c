"""How large a generated workload may be: each knob's range, and the whole trace's size.

The generator holds the whole workload in memory before it writes it (it sorts the
requests by arrival), so a knob with no upper bound (a batch rate of 1e9 lines a second,
a tool result of 1e12 tokens) grows memory until the machine kills the process. Each
knob therefore has a range that keeps every number finite and every line one the trace
readers accept (token counts at most MAX_TOKENS_PER_CALL, times finite), and
`WorkloadBudget` counts what the workload holds as it is made, so knobs whose product
is too large (many sessions of long prompts in small blocks) stop it early with a
ValueError naming the flags, before memory runs out. The caps are far beyond what the
simulator or a replay can use: 1,000,000 requests, 50,000,000 block ids (a trace file of
about 900 MB: ids of about 16 digits).
"""
from __future__ import annotations

from dataclasses import dataclass

from cache.trace_format import MAX_TOKENS_PER_CALL

MAX_REQUESTS = 1_000_000
MAX_BLOCK_IDS = 50_000_000
MAX_SESSIONS = 1_000_000          # --tenants times --sessions
MAX_TOKENS = MAX_TOKENS_PER_CALL  # any token count, and --block-size (what the trace readers accept)
MAX_DURATION_S = 1_000_000.0      # a median tool duration or think time (about 11.6 days)
MIN_SESSION_RATE_PER_S = 1e-6     # a session every 11.6 days, at least
MAX_SESSION_RATE_PER_S = 1e6
MAX_SIGMA = 4.0                   # a log-normal's sigma: its 84th percentile is e^4 = 55 times the median
MAX_BATCH_LINES_PER_S = 1e6


@dataclass(frozen=True, slots=True)
class WorkloadLimits:
    """The whole workload's caps (tests pass smaller ones)."""

    max_requests: int = MAX_REQUESTS
    max_block_ids: int = MAX_BLOCK_IDS


class WorkloadBudget:
    """Counts the requests and the block ids the workload holds as it is made; raises
    ValueError (naming the flags that set the size) the moment either passes its cap.
    Invariant: the counts never pass the caps by more than one request's worth."""

    __slots__ = ("limits", "num_requests", "num_block_ids")

    def __init__(self, limits: WorkloadLimits) -> None:
        self.limits = limits
        self.num_requests = 0
        self.num_block_ids = 0

    def spend(self, num_requests: int, num_block_ids: int, *, cause: str | None = None) -> None:
        """Count `num_requests` more requests holding `num_block_ids` block ids in all.
        `cause` names what adds them, for the error (default: the sessions' flags)."""
        self.num_requests += num_requests
        self.num_block_ids += num_block_ids
        if self.num_requests > self.limits.max_requests:
            raise ValueError(f"{cause or 'the sessions'} would make more than the {self.limits.max_requests:,} "
                             "requests a workload may have: lower " + (
                                 "it" if cause else "--sessions or --tenants"))
        if self.num_block_ids > self.limits.max_block_ids:
            raise ValueError(f"{cause or 'the sessions'} would hold more than the {self.limits.max_block_ids:,} "
                             "block ids a workload may have (its trace file would take about "
                             f"{self.limits.max_block_ids * 18 / 1e6:,.0f} MB): lower " + (
                                 "it, or raise --block-size" if cause else
                                 "--sessions, --tenants or --max-context-tokens, or raise --block-size"))
