"""Live agent sessions: which session a request belongs to, and when sessions end.

`SessionTable` is plain in-memory bookkeeping (no I/O); the tracer calls it under one lock.
A request names its session (header, metadata), or it is stitched by prefix: it
continues the session of a recent step whose conversation it extends, that is, the
request's messages up to some assistant message equal that step's request, and the
assistant message is that step's response (exact), or merely stands where it was
(loose: the agent rewrote or replaced the reply). Every choice of an n > 1 step counts
as its response, so the agent may go on from whichever it kept. Longer matches win, exact
beats loose at equal length, and among equal candidates the session whose calls the
request's tool results (the tool messages after its last assistant message) answer wins,
then one whose step no later step went on from yet (identical runs' overlapping turns go
one to each), then the request's agent's, then the session whose latest step it is. A
request whose tool results answer calls a recent step asked for (any choice's) continues
that step's session when no prefix matches (a handoff: the new agent's instructions replace
the system prompt), and also when the longest match is loose and its session asked for none
of those calls (the agent edited an earlier reply: the request before it may equal the
first request of many agents).

Invariants:
- a session is identified by (tenant, id); digests, call-id keys included, are
  tenant-rooted and every index entry also records its tenant, so no request is ever
  stitched to another tenant's session, whatever its content;
- an exact prefix match always wins over a call-id match, a loose one only when its
  session asked for one of the answered calls or no live session did; either continues
  only a live session; tool results are read only where the prefix leaves a doubt (no
  match, a loose one, several candidates), so an exact continuation costs O(prefix);
- the session's last response end (`last_ended_s`) and pending calls (`last_asked`) are
  those of its head: the latest step (by index) that ended having generated something
  (succeeded, or was cut part-way); a step that failed without generating anything
  (`step_outcome.generated_nothing`: refused, its client gone while it queued) is no response and
  leaves the head as it was, so a retry's gap runs from the reply that asked for the
  tools; a step opened while others are in flight gets the same last end as one opened
  idle (concurrent tool results each get their gap);
- a request's content extends (`prefix_step`) no step that ended having generated nothing (its
  stored request may be cut, content_rows.py): a retry of one extends the base before it, or none;
- a step carrying tool results counts its tool run from the end of the response that
  asked for those calls (`tool_run_starts`), not the latest one: calls an agent used as a
  tool makes under the session's id while it runs fall inside the run; one carrying only
  results an earlier response carried (a retry after a cut stream) repeats the runs;
- a session with a request in flight never expires; an idle one expires once
  `idle_timeout_s` passed since its last activity, and its index entries go with it;
- memory is bounded: at most `max_sessions` live sessions, `max_keys_per_session` index
  entries each (prefix digests and asked call ids together), and as many
  "dormant" explicit sessions (step count only) so a named session resumed after
  expiry continues its step numbering;
- for room, the least recently active session of the tenant holding the most live ones
  is evicted, the opener's new one counted (ties: the opener, then the tenant first at
  that count): a tenant holding at most `max_sessions` / T (T: tenants with live
  sessions, the opener included) never loses one to another's new session
  (`cache.tenant_sessions`, O(1)).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents_trace.conversation import call_id_digest, trailing_tool_call_ids
from agents_trace.ordered_ids import time_ordered_hex
from agents_trace.prompt_blocks import PreviousPrompt
from agents_trace.records import EndReason, SessionEnded, SessionId, SessionSource
from agents_trace.tool_run_starts import AskedEnds, note_asked_ends, repeats_tool_runs, tool_run_start
from agents_trace.session_matching import SessionKey, StepMatching, StepRef
from cache.tenant_sessions import TenantSessions

MAX_REFS_PER_KEY = 4
EXPLICIT_SOURCES = frozenset({"header", "metadata", "user"})   # a session the client names


@dataclass(slots=True)
class SessionState:
    tenant: str
    session: SessionId
    source: SessionSource
    last_active_s: float
    agent: str | None = None   # the latest step's agent that named one (`x-agent-name`): breaks ties
    num_steps: int = 0
    num_in_flight: int = 0
    head_index: int | None = None
    last_ended_s: float | None = None
    last_asked: dict[str, str] = field(default_factory=dict)
    last_request: tuple[bytes, int, int] | None = None   # the prefix base: (digest, count, step index)
    answered_request: tuple[bytes, int, int] | None = None   # the last base whose step generated something
    keys: deque = field(default_factory=deque)
    previous_prompt: PreviousPrompt = field(default_factory=PreviousPrompt)
    asked_ends: AskedEnds = field(default_factory=dict)   # call id -> its run's start (`tool_run_starts`)


@dataclass(slots=True)
class OpenedStep:
    """What `open_step` decided, copied out while the table's lock is held."""

    session: SessionId
    source: SessionSource
    index: int
    prev_ended_s: float | None   # the last response that ended before the request arrived
    asked: dict[str, str]
    num_prefix_messages: int
    prefix_step: int | None
    knows_response: bool = True   # the table saw a response of the session since it went live
    repeats_tool_runs: bool = False   # its tool results were all carried by an earlier response


class SessionTable(StepMatching):
    __slots__ = ("idle_timeout_s", "max_sessions", "max_keys_per_session", "_live",
                 "_by_tenant", "_dormant", "_by_response", "_by_request", "_by_call")

    def __init__(self, *, idle_timeout_s: float, max_sessions: int,
                 max_keys_per_session: int = 64) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self.max_keys_per_session = max_keys_per_session
        self._live: OrderedDict[SessionKey, SessionState] = OrderedDict()   # by last activity
        self._by_tenant = TenantSessions()   # the same sessions per tenant: which to evict for room
        self._dormant: OrderedDict[SessionKey, tuple[int, float | None]] = OrderedDict()
        self._by_response: dict[bytes, list[StepRef]] = {}
        self._by_request: dict[bytes, list[StepRef]] = {}
        self._by_call: dict[bytes, list[StepRef]] = {}

    @property
    def num_live(self) -> int:
        return len(self._live)

    def num_steps_in_flight(self) -> int:
        return sum(state.num_in_flight for state in self._live.values())

    def get(self, tenant: str, session: str) -> SessionState | None:
        return self._live.get((tenant, session))

    # --- opening and closing steps ---------------------------------------------------
    def open_step(self, tenant: str, explicit: tuple[str, SessionSource] | None,
                  digests: Sequence[bytes], messages: Sequence[Any], now_s: float,
                  agent: str | None = None) -> tuple[OpenedStep, list[SessionEnded]]:
        """Resolve the request's session (`agent`: its sender, where named) and give it the next step index."""
        evicted: list[SessionEnded] = []
        matched: StepRef | None = None
        stitched: StepRef | None = None   # matched, or the step whose calls the request answers
        if explicit is not None:
            state = self._live.get((tenant, explicit[0]))
            if state is None:
                state = self._create(tenant, SessionId(explicit[0]), explicit[1], now_s, evicted)
        else:
            matched, stitched = self._stitch(tenant, digests, messages, agent)
            state = self._live.get((tenant, stitched.session)) if stitched else None
            if state is None:
                matched = stitched = None
                state = self._create(tenant, self._new_id(tenant, now_s), "new", now_s, evicted)
        num_prefix, prefix_step = 0, None
        if matched is not None:
            num_prefix, prefix_step = matched.num_messages, matched.index
        elif state.last_request is not None:
            digest, count, base_index = state.last_request
            if 0 < count <= len(digests) and digests[count - 1] == digest:
                num_prefix, prefix_step = count, base_index
        # NOTE: a call-id match is recorded as "prefix" too (SessionSource has no value of its own)
        answered_ids = trailing_tool_call_ids(messages)
        opened = OpenedStep(session=state.session, source=state.source if stitched is None
                            else "prefix", index=state.num_steps,
                            prev_ended_s=tool_run_start(state.asked_ends, answered_ids, state.last_ended_s),
                            asked=dict(state.last_asked),
                            num_prefix_messages=num_prefix, prefix_step=prefix_step,
                            knows_response=state.head_index is not None,
                            repeats_tool_runs=repeats_tool_runs(state.asked_ends, answered_ids))
        state.num_steps += 1
        state.num_in_flight += 1
        state.last_active_s, state.agent = now_s, agent or state.agent
        state.last_request = (digests[-1], len(digests), opened.index) if digests else None
        self._touch(tenant, state.session)
        return opened, evicted

    def close_step(self, tenant: str, session: str, index: int, ended_s: float, *,
                   request_digest: bytes | None, num_messages: int,
                   response_digest: bytes | None, asked: Mapping[str, str],
                   other_response_digests: Sequence[bytes] = (), is_response: bool = True,
                   answered: Sequence[str] = ()) -> None:
        """A step ended; a successful one becomes a place later requests may continue:
        its request, every choice's response (`response_digest`, `other_response_digests`)
        and the calls any choice asked for; one ending after a later step (older than the
        head) only by its responses and calls, leaving the head alone. A step that
        generated nothing (`is_response` False) is no response: it leaves the head, the
        session's last response end and its pending calls as they were. A response's end
        starts the tool runs of the calls it asked for (and of the known ones it `answered`:
        a retry of it counts from there). (What its prompt shared with an earlier one: the
        tracer's, by the session's `previous_prompt`, before this.)"""
        state = self._live.get((tenant, session))
        if state is None:
            return
        state.num_in_flight = max(0, state.num_in_flight - 1)
        state.last_active_s = max(state.last_active_s, ended_s)
        self._touch(tenant, state.session)
        is_base = state.last_request is not None and state.last_request[2] == index
        if not is_response:   # NOTE: refused: nothing to index either (no digest, no call)
            if is_base:   # its stored request may be cut (content_rows): the base before it again
                state.last_request = state.answered_request
            return
        if is_base:
            state.answered_request = state.last_request
        is_late = state.head_index is not None and index < state.head_index
        if not is_late:
            state.head_index = index
            state.last_ended_s = ended_s
            state.last_asked = dict(asked)
        note_asked_ends(state.asked_ends, answered, asked, ended_s, self.max_keys_per_session)
        ref = StepRef(tenant, state.session, index, num_messages)
        # NOTE: call ids first, so a step asking for many calls pushes out its own calls,
        # not the prefix digests that stitch most continuations
        for call_id in asked:
            self._add_key(state, self._by_call, call_id_digest(tenant, call_id), ref)
        for digest in (response_digest, *other_response_digests):
            if digest is not None:
                self._add_key(state, self._by_response, digest, ref)
        if request_digest is not None and not is_late:   # NOTE: the newer ref (a retry: same request) stays
            self._add_key(state, self._by_request, request_digest, ref)

    def end_if_unreachable(self, tenant: str, session: str) -> SessionEnded | None:
        """End now (reason "failed") a session the gateway opened whose one step failed,
        leaving nothing a later request could be matched to (no request, response or call
        indexed: a refused first request; its retry opens a session of its own), instead of
        holding it until the idle timeout: a tenant refused at a high rate holds no
        memory for it. A named session, or one with a step in flight, is kept."""
        state = self._live.get((tenant, session))
        if state is None or state.source != "new" or state.num_steps != 1 or state.num_in_flight or state.keys:
            return None
        return self._remove((tenant, session), "failed")

    # --- expiry ----------------------------------------------------------------------
    def expire(self, now_s: float) -> list[SessionEnded]:
        """End every session idle for `idle_timeout_s` with nothing in flight."""
        idle: list[SessionKey] = []
        for key, state in self._live.items():   # no copy: a sweep costs what it ends
            if state.last_active_s + self.idle_timeout_s > now_s:
                break   # NOTE: ordered by last activity, so the rest are younger
            if state.num_in_flight == 0:
                idle.append(key)
        return [self._remove(key, "idle") for key in idle]

    def end_all(self, reason: EndReason = "shutdown") -> list[SessionEnded]:
        return [self._remove(key, reason) for key in list(self._live)]

    # --- internals -------------------------------------------------------------------
    def _new_id(self, tenant: str, now_s: float) -> SessionId:
        """`sess_` + the creation time in microseconds (13 hex digits) + 24 random bits
        (`time_ordered_hex`): the trace store's (tenant, session) keys grow at the right
        edge of its B-trees."""
        while True:
            candidate = SessionId(f"sess_{time_ordered_hex(now_s, 24)}")
            if (tenant, candidate) not in self._live:
                return candidate

    def _create(self, tenant: str, session: SessionId, source: SessionSource, now_s: float,
                evicted: list[SessionEnded]) -> SessionState:
        while len(self._live) >= self.max_sessions:
            evicted.append(self._remove(self._by_tenant.to_evict(tenant), "evicted"))
        state = SessionState(tenant, session, source, now_s)
        dormant = self._dormant.pop((tenant, session), None)
        if dormant is not None:
            state.num_steps, state.last_ended_s = dormant
        self._live[(tenant, session)] = state
        self._by_tenant.add(tenant, session)
        return state

    def _touch(self, tenant: str, session: SessionId) -> None:
        self._live.move_to_end((tenant, session))
        self._by_tenant.touch(tenant, session)

    def _remove(self, key: SessionKey, reason: EndReason) -> SessionEnded:
        state = self._live.pop(key)
        self._by_tenant.remove(*key)
        for index, digest in state.keys:
            refs = index.get(digest, [])
            refs[:] = [r for r in refs if (r.tenant, r.session) != key]
            if not refs:
                index.pop(digest, None)
        if state.source in EXPLICIT_SOURCES:
            self._dormant[key] = (state.num_steps, state.last_ended_s)
            while len(self._dormant) > self.max_sessions:
                self._dormant.popitem(last=False)
        return SessionEnded(state.tenant, state.session, state.num_steps, state.last_ended_s,
                            reason)

    def _add_key(self, state: SessionState, index: dict[bytes, list[StepRef]], digest: bytes,
                 ref: StepRef) -> None:
        refs = index.setdefault(digest, [])
        refs[:] = [r for r in refs if (r.tenant, r.session) != (ref.tenant, ref.session)]
        refs.append(ref)
        del refs[:-MAX_REFS_PER_KEY]
        state.keys.append((index, digest))
        while len(state.keys) > self.max_keys_per_session:
            old_index, old_digest = state.keys.popleft()
            old_refs = old_index.get(old_digest, [])
            old_refs[:] = [r for r in old_refs
                           if (r.tenant, r.session) != (ref.tenant, ref.session)]
            if not old_refs:
                old_index.pop(old_digest, None)
