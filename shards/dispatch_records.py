"""The records of the engine's request bookkeeping (`shards.dispatcher`): its settings, a
request in flight, a prefix transfer under way, what one step asks the engine to do
(`Outbound`), and the counters. Plain data; the rules are the dispatcher's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cache.hashing import BlockHash
from shards.protocol import EngineEvent, ErrorEvent, WorkItem


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    tenant_weights: tuple[tuple[str, float], ...] = ()
    max_queued_per_tenant: int = 256
    max_queued_requests: int = 1024
    max_outstanding_per_worker: int = 16
    max_outstanding_hard: int = 32
    max_attempts: int = 2
    max_queue_wait_s: float = 120.0
    # a copy is waited for as long as the recompute it spares would take, and at least this
    # long: waiting longer than that costs more than recomputing would have (one slow copy
    # then costs at most twice the recompute), abandoning sooner throws away a copy worth more
    transfer_timeout_s: float = 1.0
    retry_after_s: float = 1.0
    inline_transfers: bool = False  # workers share no memory: prefix copies travel as bytes


@dataclass(slots=True)
class Request:
    item: WorkItem
    hashes: list[BlockHash]
    submitted_s: float
    worker_id: str | None = None
    token_sent: bool = False
    num_attempts: int = 0
    sent_token_ids: list[int] = field(default_factory=list)   # its output delivered so far
    num_sent_chars: int = 0                                    # and that output's text
    num_cached_tokens: int | None = None   # of its prompt, as its first worker found them


@dataclass(slots=True)
class Transfer:
    request_id: str
    src: str
    dst: str
    deadline_s: float  # then the request goes on without it (see DispatchConfig.transfer_timeout_s)


@dataclass(frozen=True, slots=True)
class CannotStart:
    """Every worker's last start failed to load the model (`Dispatcher.set_cannot_start`):
    why, and when the next restart is due."""
    reason: str
    restart_at_s: float

    def refusal(self, request_id: str, retryable: bool, now_s: float, min_retry_after_s: float) -> ErrorEvent:
        """The "overloaded" error a request gets meanwhile: retry once the next restart is
        due (counting down), never sooner than `min_retry_after_s`."""
        return ErrorEvent(request_id, f"the model's workers cannot start ({self.reason}); retry later", "overloaded",
                          retryable=retryable, retry_after_s=max(min_retry_after_s, self.restart_at_s - now_s))


@dataclass(slots=True)
class Outbound:
    sends: list[tuple[str, object]] = field(default_factory=list)
    deliveries: list[EngineEvent] = field(default_factory=list)
    unlink: list[str] = field(default_factory=list)  # shared-memory segments nobody imports

    def extend(self, more: "Outbound") -> None:
        self.sends.extend(more.sends)
        self.deliveries.extend(more.deliveries)
        self.unlink.extend(more.unlink)


@dataclass(slots=True)
class DispatchStats:
    num_submitted: int = 0
    num_rejected: dict[str, int] = field(default_factory=dict)
    num_retried: int = 0
    num_resumed: int = 0   # streams a worker's death cut, gone on from their last token elsewhere
    num_failed_worker_died: int = 0
    num_expired: int = 0
    num_transfers_done: int = 0
    num_transfers_abandoned: int = 0
    num_transferred_blocks: int = 0

    def count_rejected(self, code: str) -> None:
        self.num_rejected[code] = self.num_rejected.get(code, 0) + 1
