"""Bounding what one span export sends and how long the last one may take.

`ByteBudgetSpanExporter` wraps the exporter a `BatchSpanProcessor` hands its batches to
and sends each batch as parts whose estimated encoded size stays under a byte budget
(`MAX_REQUEST_BYTES`, under the 4 MiB a gRPC collector accepts by default): a batch
holding one tenant's large captured prompts no longer makes a request the collector
refuses whole, taking other tenants' spans with it. A span over the budget on its own is
sent alone, so only it can be refused. The estimate is cheap (string lengths, no
encoding) and runs on the processor's export thread, never on the request path.

`FinalFlushBoundedProcessor` is a `BatchSpanProcessor` whose shutdown (the gateway's
stop) sends what is queued for at most `final_flush_s`, then drops the rest: a collector
that is down or slow no longer stretches the stop by an export timeout and retries per
batch. Every wait of the final flush (the exporter's last sends, the wait for the
processor's thread, the exporter's own shutdown, and those of the provider's other
processors) counts against one `FinalFlushDeadline`, fixed when the first of them
begins, so they never add up past `final_flush_s` in total. `FinalFlushShutdown` puts
something else stopped with the tracer provider (the GenAI metrics' meter provider) under
that same deadline: it exports no spans, and at the provider's shutdown calls its
`shutdown` with the seconds left.

Invariants: every part a batch is split into, except a single span over the budget,
has an estimated size <= the budget; spans keep their order; after the final flush's
deadline the wrapped exporter is never called again.
"""
from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

MAX_REQUEST_BYTES = 3 * 1024 * 1024   # a 1 MiB margin under gRPC's default 4 MiB message limit
FINAL_FLUSH_S = 5.0                   # how long the stop may spend sending queued spans
SPAN_OVERHEAD_BYTES = 256             # ids, times, kind, status, scope: generous
VALUE_OVERHEAD_BYTES = 8              # a key-value's tags and lengths


def estimated_value_bytes(value: object) -> int:
    """An upper estimate of an attribute value's encoded size: a string's UTF-8 length
    (its length when ASCII, else four bytes a character), a list's elements' sum."""
    if isinstance(value, str):
        return len(value) if value.isascii() else 4 * len(value)
    if isinstance(value, (list, tuple)):
        return sum(estimated_value_bytes(item) + VALUE_OVERHEAD_BYTES for item in value)
    return 16


def _attributes_bytes(attributes) -> int:
    if not attributes:
        return 0
    return sum(len(key) + VALUE_OVERHEAD_BYTES + estimated_value_bytes(value)
               for key, value in attributes.items())


def estimated_span_bytes(span: ReadableSpan) -> int:
    """An upper estimate of the span's size in an OTLP request (protobuf), from the
    lengths of its name, attributes, events, links and status text."""
    size = SPAN_OVERHEAD_BYTES + len(span.name) + _attributes_bytes(span.attributes)
    size += sum(64 + len(event.name) + _attributes_bytes(event.attributes) for event in span.events)
    size += sum(64 + _attributes_bytes(link.attributes) for link in span.links)
    description = span.status.description if span.status is not None else None
    return size + (estimated_value_bytes(description) if description else 0)


def split_by_bytes(spans: Sequence[ReadableSpan], budget_bytes: int) -> list[list[ReadableSpan]]:
    """`spans` in order, cut into consecutive parts each estimated under `budget_bytes`
    (a span over it alone in its part)."""
    parts: list[list[ReadableSpan]] = []
    part: list[ReadableSpan] = []
    part_bytes = 0
    for span in spans:
        size = estimated_span_bytes(span)
        if part and part_bytes + size > budget_bytes:
            parts.append(part)
            part, part_bytes = [], 0
        part.append(span)
        part_bytes += size
    if part:
        parts.append(part)
    return parts


class ByteBudgetSpanExporter(SpanExporter):
    """Sends each batch through `exporter` in parts of at most `budget_bytes` (estimated,
    the resource's share included); from `stop_sending_in`'s deadline on, drops batches
    without sending. SUCCESS only when every part was sent."""

    def __init__(self, exporter: SpanExporter, budget_bytes: int = MAX_REQUEST_BYTES,
                 resource_bytes: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.exporter = exporter
        self.budget_bytes = max(1, budget_bytes - resource_bytes)
        self._clock = clock
        self._deadline_s: float | None = None
        self._lock = threading.Lock()

    def stop_sending_in(self, seconds: float) -> None:
        """`seconds` from now on, batches (and a batch's parts not sent yet) are dropped."""
        with self._lock:
            self._deadline_s = self._clock() + seconds

    def _is_past_deadline(self) -> bool:
        with self._lock:
            return self._deadline_s is not None and self._clock() >= self._deadline_s

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.SUCCESS
        for part in split_by_bytes(spans, self.budget_bytes):
            if self._is_past_deadline():
                return SpanExportResult.FAILURE
            if self.exporter.export(part) is not SpanExportResult.SUCCESS:
                result = SpanExportResult.FAILURE   # the other parts still go
        return result

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        if "timeout_millis" in inspect.signature(self.exporter.shutdown).parameters:
            self.exporter.shutdown(timeout_millis=timeout_millis)
        else:
            self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


@dataclass
class FinalFlushDeadline:
    """The one deadline of a final flush: fixed by the first `start` (`final_flush_s` from
    then, on `clock`), the same for every later call, so the processors sharing it (one
    provider's) and each one's waits all end by it."""

    final_flush_s: float = FINAL_FLUSH_S
    clock: Callable[[], float] = time.monotonic
    _deadline_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> float:
        """The deadline (on `clock`), fixed now unless it already was."""
        with self._lock:
            if self._deadline_s is None:
                self._deadline_s = self.clock() + self.final_flush_s
            return self._deadline_s

    def remaining_s(self) -> float:
        """Seconds left until the deadline (0 once past it); starts it if need be."""
        return max(0.0, self.start() - self.clock())


class FinalFlushBoundedProcessor(BatchSpanProcessor):
    """A `BatchSpanProcessor` whose `shutdown` returns by its `deadline` (`final_flush_s`
    from the first shutdown of the processors sharing it): it sends the queue until then,
    then tells the exporter to stop (which also ends its retries) and drops what is left;
    an export still waiting on a slow collector is left to its daemon thread."""

    def __init__(self, exporter: ByteBudgetSpanExporter, final_flush_s: float = FINAL_FLUSH_S,
                 deadline: FinalFlushDeadline | None = None, **batching) -> None:
        super().__init__(exporter, **batching)
        self.bounded_exporter = exporter
        self.deadline = deadline if deadline is not None else FinalFlushDeadline(final_flush_s)

    def shutdown(self) -> None:
        remaining_s = self.deadline.remaining_s()   # one deadline for the sends and the waits below
        self.bounded_exporter.stop_sending_in(remaining_s)
        self._batch_processor.shutdown(timeout_millis=self.deadline.remaining_s() * 1000)


class FinalFlushShutdown(SpanProcessor):
    """A processor that exports no spans: at its provider's shutdown it calls
    `shutdown(seconds)` with what is left of `deadline` (0 once past it; the callee must
    return by then). `build_provider` gives it the deadline its exporters' processors
    share, and adds it after them, so it gets what their final flush left: the stop's
    final flush stays `final_flush_s` in all."""

    def __init__(self, shutdown: Callable[[float], None]) -> None:
        self._shutdown = shutdown
        self.deadline = FinalFlushDeadline()

    def shutdown(self) -> None:
        self._shutdown(self.deadline.remaining_s())
