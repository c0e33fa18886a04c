"""The trace writer's calls to its store that outlive a failure, and its store upkeep:
ending the sessions other writers left open, handing over the spans they left open in
sessions it resumes, retention, the damage check (agents_trace/writer.py runs them on
its thread).

Invariants: a store call that fails (an SQLite or OS error) is counted and logged, at
most once a minute per kind, and gives its default, never stopping the thread (but a
batch's write finding the store busy, which the writer holds and tries again:
writer_held.py); a store
SQLite finds damaged is set aside and the call made again on a new one (store.py); a
session another writer left open is ended once idle past the idle timeout plus a margin
(the same again, at most ABANDONED_MARGIN_S), and its `invoke_agent` span exported. The
upkeep (those ends, the span hand-over, retention) never runs while the store is busy
(`_store_busy`: the last try found it locked by another connection) until a write succeeds
or a try at the lock that never waits finds it free: each busy try would block the writer
the busy timeout and warn again (QA197 F5); an upkeep call finding it busy is no failure.

A session this writer opens while the store names another writer's open span (a gateway
killed and restarted, its agent resuming with its `x-session-id`; or one session served
by two gateways) keeps that span named (store_rows.py) and noted here (`SpanBefore`).
By the sweep's rule, once that span has had no step for the idle timeout plus the margin
its writer, were it alive, would have ended it, clearing the ids; so when the ids are
still there then, and its step count unchanged, this writer exports it (ended idle at
its last step, as the sweep does) and names its own span instead, in one write
transaction: of writers racing for it one wins, and one still adding steps is left it.

A step of a session another writer also stores into takes its gap from the responses
stored there (`_with_shared_gap`, step_numbering.py's `with_shared_gap`); a session no
other writer stored a step of since this one knew it costs each step the session table
gave a gap one primary-key lookup, and keeps the table's gap.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from agents_trace.records import Step
from agents_trace.spans import record_left_open_session_span, session_span_ids
from agents_trace.step_numbering import SHARED_GAP_WINDOW, OpenSession, PlacedPrefix, StoredResponse, with_shared_gap
from agents_trace.store import TraceStore
from agents_trace.store_rows import GENERATED_NOTHING, SELECT_NAMED_SPAN, SET_SPAN, LeftOpenSpan, left_open_span
from agents_trace.store_locks import is_store_busy, is_write_locked
from cache.sqlite_transaction import transaction

log = logging.getLogger("stepahead.agents_trace")

ABANDONED_MARGIN_S = 60.0   # at most this past the idle timeout before another writer's open session is ended
DAMAGE_CHECK_INTERVAL_S = 60.0   # a reported damage is checked (O(store size)) at most this often

T = TypeVar("T")
# (tenant, session): its last stored step's index and identity
SELECT_TOP_STEP = ("SELECT idx, request_id, arrived_s FROM steps WHERE tenant = ? AND session = ? "
                   "ORDER BY idx DESC LIMIT 1")
# (tenant, session, SHARED_GAP_WINDOW, ended from, ended until): its latest steps' responses ended then
SELECT_RECENT_RESPONSES = (
    "SELECT request_id, arrived_s, ended_s, tool_calls, other_choices, gateway_started_s FROM (SELECT request_id, "
    "arrived_s, ended_s, tool_calls, other_choices, gateway_started_s, error, num_output_tokens, idx FROM steps "
    f"WHERE tenant = ? AND session = ? ORDER BY idx DESC LIMIT ?) WHERE ended_s >= ? AND ended_s <= ? AND NOT "
    f"{GENERATED_NOTHING}")


@dataclass(slots=True)
class SpanBefore:
    """Another writer's open span named by a session this writer opened after it: as last
    read (`left.last_s`: its session's last step then; `left.num_steps`: its steps then),
    and the start of the span this writer opened (`successor_started_s`), named once that
    one is handed over."""

    left: LeftOpenSpan
    successor_started_s: float


class StoreUpkeep:
    """What `TraceWriter` does with its store beside writing steps. Reads the writer's
    `store`, `stats`, `otel`, `clock`, `idle_timeout_s`, `_open`, `_spans_before`,
    `_failures`, `_store_busy` and `_next_damage_check_s`."""

    def _abandoned_before_s(self) -> float:
        """A session whose last step ended before this is left open by a writer gone."""
        return self.clock() - self.idle_timeout_s - min(self.idle_timeout_s, ABANDONED_MARGIN_S)

    def _note_span_before(self, step: Step, started_s: float) -> None:
        """`step` opened its session here, after steps stored by then: when the store names
        another writer's open span for it, note it (see the module's docstring), and hand
        it over now if it is past the sweep's rule already."""
        key = (step.tenant, step.session)
        row = self._on_store("reading the trace store", lambda store: store.db.execute(
            SELECT_NAMED_SPAN, key).fetchone(), None)
        if row is None:
            return
        left = left_open_span(row)
        before = self._spans_before.get(key)
        if before is None or before.left.ids != left.ids:
            self._spans_before[key] = SpanBefore(left, started_s)
        else:   # opened again here while that span is still named
            before.successor_started_s = started_s
        self._hand_over_spans_before([key])

    def _hand_over_spans_before(self, keys: list[tuple[str, str]] | None = None) -> None:
        """Hand over the noted spans (`keys`' only, when given) past the sweep's rule; none
        while the store is busy (a later sweep does)."""
        if self._store_busy:
            return
        before_s = self._abandoned_before_s()
        num_sent = 0
        for key in list(self._spans_before if keys is None else keys):
            before = self._spans_before[key]
            if before.left.last_s >= before_s:
                continue
            outcome = self._on_store("handing over a span left open in the trace store",
                                     lambda store: self._hand_over(store, key, before), None, is_upkeep=True)
            if outcome is None:
                continue   # the store failed: the next sweep tries again
            is_settled, left = outcome
            if not is_settled:   # its writer added steps: alive, so it ends it, unless it too goes
                before.left = left
                continue
            del self._spans_before[key]
            if left is not None and self.otel is not None:
                num_sent += record_left_open_session_span(self.otel, left)
        if num_sent:
            log.info("exported the invoke_agent span of %d resumed session(s) that a gateway stopped without "
                     "ending left open", num_sent)

    def _hand_over(self, store: TraceStore, key: tuple[str, str],
                   before: SpanBefore) -> tuple[bool, LeftOpenSpan | None]:
        """In one write transaction: (True, the span to export) when the session still names
        `before`'s span with no step added, now naming this writer's own open span instead;
        (True, None) when it names it no more (its writer ended it; another handed it
        over), naming this writer's span if it names none; (False, the span as read now)
        when its writer added steps since."""
        session = self._open.get(key)
        ids = None if session is None else session_span_ids(session.span)
        mine = (None, None, None, None, 0, 0, 0, 0) if ids is None else (
            ids.trace_id, ids.span_id, ids.parent_span_id, before.successor_started_s, session.num_steps,
            session.num_input_tokens, session.num_cached_tokens, session.num_output_tokens)
        with transaction(store.db, "BEGIN IMMEDIATE") as db:
            row = db.execute(SELECT_NAMED_SPAN, key).fetchone()
            now = None if row is None else left_open_span(row)
            if now is None or now.ids != before.left.ids:
                if now is None and ids is not None:
                    db.execute(SET_SPAN, (*mine, *key, None))
                return True, None
            if now.num_steps != before.left.num_steps:
                return False, now
            db.execute(SET_SPAN, (*mine, *key, now.ids.span_id))
        return True, dataclasses.replace(now, last_s=before.left.last_s)

    def _with_shared_gap(self, step: Step, session: OpenSession) -> Step:
        """`step` (own index, before `with_stored_gap`) with its gap from the responses
        another writer stored (`with_shared_gap`) where its session is shared: the store's
        last step of the session is past `session.known_index`, or another than the one this
        writer placed at its index (a delete freed it: QA203 F1) (then `is_shared`), or, on
        the step that opened it, its last stored response ended after the one the session
        table knew. Steps this writer stored (the latest it placed, told by request id and
        arrival, or rows of its gateway's start) count only as the response that asked for
        the calls a step answers. A response another writer had not stored yet when the
        step is made is not seen."""
        prev_ended_s = step.prev_ended_s
        if self.store is None or prev_ended_s is None:
            return step
        key = (step.tenant, step.session)
        if not session.is_shared and (session.stored_ended_s is None or session.stored_ended_s <= prev_ended_s):
            version = self.store.data_version()
            if version is not None and version == session.seen_data_version:
                return step   # no other connection wrote since the session was last found not shared
            top = self._on_store("reading the trace store",
                                 lambda store: store.db.execute(SELECT_TOP_STEP, key).fetchone(), None)
            if top is None:
                session.seen_data_version = version
                return step
            index, request_id, arrived_s = top
            placed_there = _placed_at(session, index)
            if index <= session.known_index and (placed_there is None
                                                 or placed_there == PlacedPrefix(request_id, arrived_s)):
                session.seen_data_version = version
                return step
            session.is_shared = True
        mine = {session.placed[own]: placed for own, placed in session.placed_steps.items() if own in session.placed}
        rows = self._on_store("reading the trace store", lambda store: store.db.execute(
            SELECT_RECENT_RESPONSES, (*key, SHARED_GAP_WINDOW, prev_ended_s, step.arrived_s)).fetchall(), [])
        own_steps = set(mine.values())
        own_started_s = self.store.gateway_started_s
        is_answering = bool(step.after.tools)
        return with_shared_gap(step, [StoredResponse(
            ended_s, _call_ids(calls, choices) if is_answering else frozenset(),
            PlacedPrefix(request_id, arrived_s) in own_steps or (own_started_s is not None
                                                                  and started_s == own_started_s))
            for request_id, arrived_s, ended_s, calls, choices, started_s in rows])

    def _end_abandoned(self) -> None:
        """End in the store the sessions other writers left open (see the module's docstring)."""
        if self.store is None:
            return
        before_s = self._abandoned_before_s()
        spans: list[LeftOpenSpan] | None = None if self.otel is None else []
        num_ended = self._on_store("ending sessions left open in the trace store",
                                   lambda store: store.end_abandoned(before_s, self._open, spans), 0, is_upkeep=True)
        for left in spans or ():
            record_left_open_session_span(self.otel, left)
        if num_ended:
            self.stats.num_abandoned_ended += num_ended
            log.info("ended %d session(s) left open in the trace store %s since before %.0f s ago "
                     "(a gateway stopped without ending them)", num_ended, self.store.path,
                     self.clock() - before_s)

    def _retain(self) -> None:
        self.stats.num_retention_removed += self._on_store(
            "trace store retention", lambda store: store.apply_retention(self.clock()), 0, is_upkeep=True)

    def _is_store_free(self) -> bool:
        """Whether the upkeep may run: the last try at the store did not find it busy, or a
        try at its lock that never waits finds it free now (which ends the wait)."""
        if self._store_busy and not self._on_store("checking the trace store's lock",
                                                   lambda store: is_write_locked(store.db), True):
            self._store_busy = False
        return not self._store_busy

    def _check_store(self) -> None:
        if self.store is not None and time.monotonic() >= self._next_damage_check_s:
            self._next_damage_check_s = time.monotonic() + DAMAGE_CHECK_INTERVAL_S
            self._on_store("checking the trace store", lambda store: store.check_for_damage(), False)

    def _on_store(self, what: str, call: Callable[[TraceStore], T], default: T, *what_args: object,
                  raises_busy: bool = False, is_upkeep: bool = False) -> T:
        """`call(store)`, surviving a damaged store (store.py); any other error is counted
        and logged (`what`, a %-template of `what_args`, is also its kind of failure),
        and gives `default`, but, when `raises_busy`, a busy store's "database is locked",
        raised for the caller to try again (writer_held.py); and, when `is_upkeep`, a busy
        store is no failure: `default`, the store marked busy (the upkeep waits for it)."""
        store = self.store
        try:
            return store.surviving_damage(lambda: call(store))
        except (sqlite3.Error, OSError) as exc:
            if raises_busy and is_store_busy(exc):
                raise
            if is_upkeep and is_store_busy(exc):
                self.stats.num_store_busy += 1
                self._store_busy = True
                log.info("%s waits: the trace store %s is locked by another connection", what, store.path)
                return default
            self.stats.num_store_errors += 1
            self._failures.log(what, f"stepahead: warning: {what} failed", *what_args)
            return default


def _call_ids(calls_json: str, choices_json: str) -> frozenset[str]:
    """The ids of the calls a stored step's choices asked for (its `tool_calls` and
    `other_choices` columns, store_rows.py); none where they cannot be read."""
    try:
        calls = list(json.loads(calls_json))
        for _, choice_calls in json.loads(choices_json):
            calls.extend(choice_calls)
        return frozenset(call[0] for call in calls if isinstance(call, list) and call and isinstance(call[0], str))
    except (ValueError, TypeError):
        return frozenset()


def _placed_at(session: OpenSession, index: int) -> PlacedPrefix | None:
    """The step this writer placed at stored `index`, among the latest it keeps, or None."""
    for own, stored in session.placed.items():
        if stored == index:
            return session.placed_steps.get(own)
    return None
