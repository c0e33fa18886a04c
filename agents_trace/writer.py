"""The trace writer: one daemon thread that drains trace events off the request path.

For each finished Step, in queue order: its gap where only the store knows it (a session
continued after a restart, or one another gateway also serves: step_numbering.py), the
spans (spans.py), the forecast check, the subscribers (e.g. the predictor), a new forecast
for the session's next step, and one store row; for each SessionEnded: the `invoke_agent`
span's end and the subscribers. Every `sweep_interval_s` it asks the session table for idle
sessions, and every `retention_interval_s` it applies the store's retention.

Several gateways may write one store, one session too: how a step's index is decided
then is step_numbering.py's.

Each sweep also ends the sessions other writers left open (a gateway killed before ending
them: `TraceStore.end_abandoned`), once idle past `idle_timeout_s` plus a margin (the same
again, at most ABANDONED_MARGIN_S: a write late behind a busy store; writer_store.py), and exports their
`invoke_agent` spans, which their writer never did (spans.py; at most the store's batch a
sweep). Each step's row names its session's span, so the store can hand it over. A
session this writer opens whose row names another writer's open span (resumed after that
gateway was killed) has that span exported by the same rule, before or after its own
opens (writer_store.py's `SpanBefore`).

Invariants: the request path only ever calls `EventQueue.offer`, which never blocks
(event_queue.py: a full queue drops the event and counts it). A failing subscriber,
forecaster or store write is counted and logged (repeats of a kind at most once a
minute, `cache.repeated_failures`), and never stops the thread; a store
SQLite finds damaged is set aside and the call made again on a new one (store.py), and
one a reader found damaged (`report_store_damage`) is checked, at most once a minute.
Only this thread touches the writer connection, the open `invoke_agent` spans, the
other writers' spans noted and the forecasts. A write that finds the store locked by
another connection past the busy timeout (a `traces delete`, another gateway's long
transaction) loses nothing: the batch is held, in order, and written with the next, in
transactions of bounded size (writer_held.py, writer_batches.py: bounded, one warning an
episode); meanwhile the thread drains the queue into it and leaves the sweep's and
retention's store upkeep until a write succeeds or the lock is found gone (writer_store.py).
"""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from cache.forecast import Forecast
from cache.repeated_failures import RepeatedFailures
from opentelemetry import trace

from agents_trace.event_queue import EventQueue
from agents_trace.records import SessionEnded, Step, TraceEvent
from agents_trace.spans import end_session_span, record_chat_span, record_tool_spans, session_span_ids, \
    session_span_start_s, start_session_span, used_tokens
from agents_trace.step_outcome import generated_nothing
from agents_trace.step_numbering import OpenSession, numbered, offset_past, with_stored_gap
from agents_trace.store import StepRow, TraceStore
from agents_trace.symbols import check_forecast
from agents_trace.writer_batches import BatchWrites
from agents_trace.writer_held import MAX_HELD_STEPS, RETRY_S, HeldBatch
from agents_trace.writer_stats import WriterStats
from agents_trace.writer_store import SpanBefore, StoreUpkeep

__all__ = ["Forecaster", "Subscriber", "TraceWriter", "WriterStats"]

log = logging.getLogger("stepahead.agents_trace")

# NOTE: after a step arrives the thread waits this long for more before writing, so one
# SQLite transaction and one wake-up serve many steps: under load (600 steps/s) this cut
# the writer's CPU per step by a third (190 -> 128 us); a trace shows up <= 20 ms later.
BATCH_LINGER_S = 0.02
Forecaster = Callable[[str, str, float], Forecast | None]
Subscriber = Callable[[TraceEvent], None]


@dataclass(slots=True)
class _Flush:
    done: threading.Event


@dataclass(slots=True)
class _CheckStore:
    pass


@dataclass(slots=True)
class _Stop:
    pass


class TraceWriter(BatchWrites, StoreUpkeep):
    def __init__(self, *, events: EventQueue, stats: WriterStats, otel: trace.Tracer | None,
                 store: TraceStore | None, expire: Callable[[float], list[SessionEnded]],
                 clock: Callable[[], float], idle_timeout_s: float,
                 retention_interval_s: float, sweep_interval_s: float = 1.0,
                 batch_linger_s: float = BATCH_LINGER_S, max_held_steps: int = MAX_HELD_STEPS) -> None:
        self.events = events
        self.stats = stats
        self.otel = otel
        self.store = store
        self.expire = expire
        self.clock = clock
        self.idle_timeout_s = idle_timeout_s
        self.retention_interval_s = retention_interval_s
        self.sweep_interval_s = sweep_interval_s
        self.batch_linger_s = batch_linger_s
        self.max_held_steps = max_held_steps
        self.subscribers: tuple[Subscriber, ...] = ()
        self.forecaster: Forecaster | None = None
        self._open: OrderedDict[tuple[str, str], OpenSession] = OrderedDict()  # least recently seen first
        # the steps of the batch being made, in order: (session key, own index), and
        # (tenant, session, own index) -> the index asked for
        self._batch: list[tuple[tuple[str, str], int]] = []
        self._pending: dict[tuple[str, str, int], int] = {}
        self._ended_spans: list[tuple[str, str, str]] = []   # (tenant, session, span id) ended since the last write
        self._spans_before: dict[tuple[str, str], SpanBefore] = {}   # other writers' open spans (writer_store.py)
        self._held = HeldBatch()   # not written yet: the store was busy (writer_held.py)
        self._store_busy = False   # the last try found the store locked: its upkeep waits (writer_batches.py)
        self._thread: threading.Thread | None = None
        self._next_damage_check_s = 0.0
        # a full disk fails every write: not a traceback each
        self._failures = RepeatedFailures(log, expected=(sqlite3.Error, OSError))

    # --- lifecycle (called from the owner's thread) ----------------------------------
    def start(self) -> None:
        if self.store is not None:
            self.store.open()
        self._thread = threading.Thread(target=self._run, name="stepahead-trace-writer",
                                        daemon=True)
        self._thread.start()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued before this call is written; False on timeout."""
        if self._thread is None or not self._thread.is_alive():
            return False
        began_s = time.monotonic()
        marker = _Flush(threading.Event())
        if not self.events.put_control(marker, timeout_s):
            return False
        return marker.done.wait(max(0.0, timeout_s - (time.monotonic() - began_s)))

    def report_store_damage(self) -> None:
        """A reader found the store damaged: the thread checks it (never blocks)."""
        self.events.put_control(_CheckStore(), 0.0)

    def stop(self, timeout_s: float) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.events.put_control(_Stop(), timeout_s)
            self._thread.join(timeout_s)
        self._thread = None
        if self.store is not None:
            self.store.close()

    # --- the thread ------------------------------------------------------------------
    def _run(self) -> None:
        next_sweep_s = time.monotonic()
        next_retention_s = time.monotonic()
        while True:
            wait_s = next_sweep_s - time.monotonic()
            items = self.events.take(min(wait_s, RETRY_S) if self._held.is_held else wait_s, self.batch_linger_s)
            while self._held.is_held and len(self._held.rows) + len(items) < self.max_held_steps:
                more = self.events.take(0.0)   # drain the queue into the hold: a busy try is slow
                if not more:
                    break
                items.extend(more)
            rows: list[StepRow] = []
            ended: list[SessionEnded] = []
            flushes: list[_Flush] = []
            is_stopping = False
            for item in items:
                if isinstance(item, Step):
                    rows.append(self._on_step(item))
                elif isinstance(item, SessionEnded):
                    ended.append(self._on_end(item))
                elif isinstance(item, _Flush):
                    flushes.append(item)
                elif isinstance(item, _Stop):
                    is_stopping = True
                elif isinstance(item, _CheckStore):
                    self._check_store()
            is_sweeping = time.monotonic() >= next_sweep_s
            if is_sweeping:
                next_sweep_s = time.monotonic() + self.sweep_interval_s
                ended.extend(self._on_end(e) for e in self._sweep())
            self._held.flushes.extend(marker.done for marker in flushes)
            is_written = self._write(rows, ended, is_final=is_stopping)
            is_retaining = self.store is not None and time.monotonic() >= next_retention_s
            # a busy store (held, dropped, or found by the upkeep) would hold the upkeep's writes up too
            if (is_sweeping or is_retaining) and is_written and self._is_store_free():
                if is_sweeping:
                    self._end_abandoned()
                    self._hand_over_spans_before()
                if is_retaining and not self._store_busy:
                    next_retention_s = time.monotonic() + self.retention_interval_s
                    self._retain()
            if is_written:
                self._held.release()
            if is_stopping:
                return

    def _call_subscribers(self, event: TraceEvent) -> None:
        for subscriber in self.subscribers:
            try:
                subscriber(event)
            except Exception:
                self.stats.num_subscriber_errors += 1
                self._failures.log("subscriber", "a trace subscriber failed")

    def _on_step(self, step: Step) -> StepRow:
        self.stats.num_steps += 1
        key = (step.tenant, step.session)
        session = self._open.get(key)
        opened_s = None
        if session is None:
            last = self._last_stored(step)
            session = self._open[key] = OpenSession(None, offset_past(last, step.index), self.clock(), step.index,
                                                    stored_ended_s=None if last is None else last[1],
                                                    known_index=-1 if last is None else last[0])
            step = with_stored_gap(self._with_shared_gap(step, session), session)
            step, prefix_in_batch, placed_prefix = numbered(key, session, step, self._pending, self._batch)
            session.span = start_session_span(self.otel, step) if self.otel is not None else None
            opened_s = session_span_start_s(step)
            if last is not None:   # stored steps: the store may name another writer's open span
                self._note_span_before(step, opened_s)
        else:
            step = with_stored_gap(self._with_shared_gap(step, session), session)
            step, prefix_in_batch, placed_prefix = numbered(key, session, step, self._pending, self._batch)
            session.last_seen_s = self.clock()
            self._open.move_to_end(key)   # keeps `_open` ordered by last_seen_s
        check = None
        if session.forecast is not None and not generated_nothing(step):   # a refused step leaves it to its retry
            check = check_forecast(session.forecast, step)
            session.forecast = None
        session.num_steps += 1
        span_tokens = num_input, num_cached, num_output = used_tokens(step)   # none for a step no model ran
        session.num_input_tokens += num_input
        session.num_cached_tokens += num_cached
        session.num_output_tokens += num_output
        trace_id = span_id = None
        if self.otel is not None and session.span is not None:
            record_tool_spans(self.otel, session.span, step)
            context = record_chat_span(self.otel, session.span, step, check)
            trace_id = trace.format_trace_id(context.trace_id)
            span_id = trace.format_span_id(context.span_id)
        self._call_subscribers(step)
        if self.forecaster is not None and step.error is None:
            try:
                session.forecast = self.forecaster(step.tenant, step.session, self.clock())
            except Exception:
                self.stats.num_forecaster_errors += 1
                self._failures.log("forecaster", "the forecaster failed")
        return StepRow(step, check, trace_id, span_id, prefix_in_batch, session_span_ids(session.span),
                       opened_s, span_tokens, placed_prefix)

    def _on_end(self, ended: SessionEnded) -> SessionEnded:
        self.stats.num_sessions_ended += 1
        session = self._open.pop((ended.tenant, ended.session), None)
        self._call_subscribers(ended)
        if session is not None and session.span is not None:
            if (ids := session_span_ids(session.span)) is not None:   # the store no longer names it
                self._ended_spans.append((ended.tenant, ended.session, ids.span_id))
            end_session_span(session.span, ended, session.num_steps, session.num_input_tokens,
                             session.num_output_tokens, session.num_cached_tokens, self.clock())
        return ended

    def _sweep(self) -> list[SessionEnded]:
        now_s = self.clock()
        ended = self.expire(now_s)
        expired = {(e.tenant, e.session) for e in ended}
        # NOTE: a backstop for sessions whose end event was dropped on a full queue.
        stale_s = now_s - 2 * self.idle_timeout_s - 60.0
        for (tenant, session), state in self._open.items():   # oldest first: stops at the first fresh one
            if state.last_seen_s >= stale_s:
                break
            if (tenant, session) not in expired:
                ended.append(SessionEnded(tenant, session, state.num_steps, None, "idle"))
        return ended

    def _last_stored(self, step: Step) -> tuple[int, float] | None:
        """The index and end of the last step stored of `step`'s session (step_numbering.py)."""
        if self.store is None or step.session_source == "new":
            return None   # NOTE: an id the gateway just minted (64 random bits) names no stored session
        return self._on_store("reading the trace store",
                              lambda store: store.last_step(step.tenant, step.session), None)
