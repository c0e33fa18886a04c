"""Keeping the OpenTelemetry SDK's export failure logging to one line a minute.

While a collector is down the SDK's exporters log each retry ("Transient error ...
retrying in 2.00s") and each failed batch, and its batch processor each span it drops
from a full queue: dozens of lines a minute. The gateway's own failures log once a minute
with a count; `quiet_sdk_export_logging` makes the SDK's do the same. It also drops the
SDK's notice that an attribute value was cut at the length limit: with content capture
on that is every long conversation, by design (`otlp_attribute_max_length`), not a fault.
The encoder's "Failed to encode key" (a value OTLP cannot hold, with a traceback) is
quieted too: the tracer keeps such values out, but one it missed must not log per span.

Invariants: of a quieted logger's warnings and errors (retry notices included: the first
of an outage is often the one naming its cause, "Connection refused"), at most one a
minute passes, and it says how many were held back since the previous one. Records below WARNING are untouched. The
filters are attached to the SDK's own loggers (process-wide, at most one each), which is
the only way to reach records the SDK makes; installing them again changes nothing.
These loggers (`MANAGED_LOGGERS`) are not under "stepahead": `stepahead serve` gives them the
product's log-line handler too (gateway/log_lines.py), so what passes prints with its level
prefix at `--log-level`, once, not bare through `logging.lastResort`.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

SDK_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",   # also the HTTP client's retries
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.sdk._shared_internal",                      # "Queue full, dropping span."
    "opentelemetry.exporter.otlp.proto.common._internal",      # "Failed to encode key ..." (a traceback)
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",  # the GenAI metrics' (otel_metrics.py)
    "opentelemetry.sdk.metrics._internal.export",              # "Exception while exporting metrics"
)
ATTRIBUTES_LOGGER = "opentelemetry.attributes"
MANAGED_LOGGERS = (*SDK_EXPORT_LOGGERS, ATTRIBUTES_LOGGER)   # those this module attaches filters to
TRUNCATION_NOTICE_PREFIX = "String attribute value exceeds max length"
FAILURE_LOG_INTERVAL_S = 60.0


class OncePerIntervalFilter(logging.Filter):
    """Lets one warning-or-worse record through per `interval_s`, holding back the others."""

    def __init__(self, interval_s: float = FAILURE_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next_s: float | None = None
        self._num_held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        with self._lock:
            now_s = self._clock()
            if self._next_s is not None and now_s < self._next_s:
                self._num_held += 1
                return False
            self._next_s = now_s + self.interval_s
            num_held, self._num_held = self._num_held, 0
        if num_held:
            record.msg = (f"{record.msg} (and {num_held} more export failure line"
                          f"{'' if num_held == 1 else 's'} in the last {self.interval_s:.0f} s)")
        return True


class TruncationNoticeFilter(logging.Filter):
    """Drops the SDK's "String attribute value exceeds max length" notice, nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(TRUNCATION_NOTICE_PREFIX))


def _attach_once(logger: logging.Logger, kind: type[logging.Filter]) -> None:
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())


def quiet_sdk_export_logging(names: tuple[str, ...] = SDK_EXPORT_LOGGERS) -> None:
    """Attach a `OncePerIntervalFilter` to each SDK export logger, and a
    `TruncationNoticeFilter` to the SDK's attributes logger, where none is yet."""
    for name in names:
        _attach_once(logging.getLogger(name), OncePerIntervalFilter)
    _attach_once(logging.getLogger(ATTRIBUTES_LOGGER), TruncationNoticeFilter)
