"""The bounded queue between the request path and the trace writer's thread.

Invariants: `offer` (the request path) never blocks: a full queue drops the event and
counts it in `stats.num_dropped`; control items (flush, stop) may wait for room, since
they never come from a request; `take` returns at most MAX_BATCH items, in queue order.
"""
from __future__ import annotations

import queue
import time
from typing import TYPE_CHECKING

from agents_trace.records import SessionEnded, Step, TraceEvent

if TYPE_CHECKING:
    from agents_trace.writer import WriterStats

MAX_BATCH = 256


class EventQueue:
    """A bounded FIFO between the request path and the writer thread."""

    __slots__ = ("_queue", "stats")

    def __init__(self, max_size: int, stats: WriterStats) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max_size)
        self.stats = stats

    def offer(self, event: TraceEvent) -> bool:
        """Enqueue without waiting; False (and counted) when the queue is full."""
        try:
            self._queue.put_nowait(event)
            return True
        except queue.Full:
            self.stats.num_dropped += 1
            return False

    def put_control(self, item: object, timeout_s: float) -> bool:
        try:
            self._queue.put(item, timeout=timeout_s)
            return True
        except queue.Full:
            return False

    def take(self, timeout_s: float, linger_s: float = 0.0) -> list:
        """Up to MAX_BATCH items, waiting at most `timeout_s` for the first and, when the
        first is a trace event (not a flush or stop), `linger_s` more for others."""
        try:
            items = [self._queue.get(timeout=max(0.0, timeout_s))]
        except queue.Empty:
            return []
        if linger_s > 0 and isinstance(items[0], (Step, SessionEnded)):
            time.sleep(linger_s)
        while len(items) < MAX_BATCH:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return items
