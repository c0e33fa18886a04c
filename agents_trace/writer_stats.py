"""The trace writer's counts, read by /metrics (gateway/tracing.py) from another thread.

Invariants: only the writer thread (and the request path's `EventQueue.offer`, for
`num_dropped`) changes them; each is a plain int, so a reader sees a whole value. A step
the writer handled but never stored is counted once: `num_dropped` (a full queue, never
handled) or `num_store_dropped_steps` (a failed write, or one held while the store was
busy past the bound or at the stop); `num_store_errors` counts the failed calls, not steps.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WriterStats:
    num_steps: int = 0
    num_sessions_ended: int = 0
    num_dropped: int = 0
    num_subscriber_errors: int = 0
    num_forecaster_errors: int = 0
    num_store_errors: int = 0
    num_store_dropped_steps: int = 0   # steps not stored: their write failed, or was dropped while busy
    num_store_busy: int = 0   # tries that found the store locked by another connection (held, tried again)
    num_store_busy_episodes: int = 0   # times the writer began holding steps for a locked store
    num_held_steps: int = 0   # steps held now for a locked store (a gauge)
    num_retention_removed: int = 0
    num_abandoned_ended: int = 0   # sessions another writer left open, ended by the sweep
