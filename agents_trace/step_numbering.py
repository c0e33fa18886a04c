"""How the trace writer numbers a session's steps when several gateways write one store,
one session too (an `x-session-id` reaching both, a Responses conversation).

A step asks the store for its own index (sessions.py) plus its session's offset
(`TraceStore.index_offset`: past the steps stored when this writer opened it); where
another writer took that index since, the store puts it after the session's last step
(store.py) and the offset moves on (`OpenSession.place`). A captured `prefix_step` names
where that step was stored (`OpenSession.prefix_index`), or, unknown once a session
moved, the messages are stored whole (`with_prefix`). A single writer numbers as
before. Spans and subscribers see the index asked for.

The same lookup gives the end of the session's last stored step: a step for which the
session table knew no earlier response (its step 0 after a restart, a dormant entry
pushed out, another gateway's session; or a retry after such a step 0 was refused) that
follows a tool run or a user turn gets its gap from it (`with_stored_gap`), before its
spans, subscribers and row see it. A step that generated nothing gets none (sessions.py).

A session another writer also stores into (`OpenSession.is_shared`: a step of another
writer was stored after the last this writer knew of) may have had its previous response
on that other gateway, which the session table never saw: a step the table gave a gap
takes it from the latest response another writer stored that ended after the table's and
by its arrival, or, carrying tool results, from the latest stored response that asked for
those calls (`with_shared_gap`, from the session's latest SHARED_GAP_WINDOW stored steps,
writer_store.py); a single writer's gaps stay the table's.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.trace import Span

from agents_trace.records import CapturedContent, Step
from agents_trace.step_outcome import generated_nothing
from cache.forecast import Forecast

PLACED_KEPT = 32   # a session's latest steps whose stored index the writer keeps, for `prefix_step`
SHARED_GAP_WINDOW = PLACED_KEPT   # a shared session's latest stored steps searched for a step's previous response


@dataclass(slots=True)
class OpenSession:
    """A session with an open `invoke_agent` span. `num_steps` and the token totals count
    the steps since the span opened, what the span says at its end; a session resumed
    after an end (idle, eviction, restart) counts from 0 again (not `SessionEnded.num_steps`,
    the session table's count, which goes on across an idle end but not a restart).

    Numbering: a step asks the store for index `own index + index_offset`; `placed` maps
    the own index of its latest PLACED_KEPT stored steps to the index they got (and
    `placed_steps` to what tells them apart: where the store has another step there, a
    delete freed the index and another writer took it); `is_moved`
    once one got another than it asked for (another writer had taken it), after which
    `index_offset` is past it. `first_index`: the own index of the first step since the
    opening. `stored_ended_s`: the end of the last response stored before the opening (the
    latest step that generated something; None: none, or not read), the previous response
    of the session table's step 0. `known_index`: the highest stored index of the session
    this writer knows of (the last stored at the opening, then each it placed; -1: none);
    `is_shared` once a step of another writer was found stored past it, or a step moved
    (`with_shared_gap`); `seen_data_version`: the store's
    `PRAGMA data_version` when the session was last found not shared (unchanged since: no
    other connection wrote, nothing to look up)."""

    span: Span | None
    index_offset: int
    last_seen_s: float
    first_index: int
    forecast: Forecast | None = None
    num_steps: int = 0
    num_input_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    is_moved: bool = False
    placed: dict[int, int] = field(default_factory=dict)
    placed_steps: dict[int, PlacedPrefix] = field(default_factory=dict)
    stored_ended_s: float | None = None
    known_index: int = -1
    is_shared: bool = False
    seen_data_version: tuple[int, int] | None = None

    def place(self, own_index: int, asked: int, stored: int, step: Step | None = None) -> None:
        """A step of the session (`step`, where given) was stored under `stored` (it asked
        for `asked`)."""
        self.placed[own_index] = stored
        if step is not None:
            self.placed_steps[own_index] = PlacedPrefix(step.request_id, step.arrived_s)
        if len(self.placed) > PLACED_KEPT:
            oldest = next(iter(self.placed))
            del self.placed[oldest]
            self.placed_steps.pop(oldest, None)
        self.known_index = max(self.known_index, stored)
        if stored != asked:
            self.is_moved = self.is_shared = True
            self.index_offset = max(self.index_offset, stored - own_index)

    def prefix_index(self, own_index: int) -> int | None:
        """Where the session's step `own_index`, written before this batch, is stored, when
        known: as asked (`index_offset` never moved), or as `placed` says."""
        if self.is_moved:
            return self.placed.get(own_index)
        if own_index >= self.first_index or self.index_offset == 0:
            return own_index + self.index_offset
        return None   # written under an earlier opening whose offset may have been another


@dataclass(frozen=True, slots=True)
class PlacedPrefix:
    """A step as this writer stored it (the step a later one's content extends): its
    request id and arrival, which tell it from another writer's step at its index."""

    request_id: str | None
    arrived_s: float


def offset_past(last_step: tuple[int, float | None] | None, first_index: int) -> int:
    """How far to shift a newly opened session's indexes, from its first step's own index,
    past its last stored step ((index, ended_s), `TraceStore.last_step`)."""
    if last_step is None or last_step[0] < first_index:
        return 0
    return last_step[0] + 1 - first_index


def with_stored_gap(step: Step, session: OpenSession) -> Step:
    """`step` (own index) with the gap since the session's last stored step where the
    session table could not know it (it knew no response of the session before the step:
    its step 0, or a retry after that step was refused) continuing stored steps after a
    tool run or a user turn (not a start) and arriving after that step ended; never for
    a step that generated nothing (no response: its retry carries the gap)."""
    prev_ended_s = session.stored_ended_s
    if (step.prev_ended_s is not None or prev_ended_s is None or step.after.kind == "start"
            or step.arrived_s <= prev_ended_s or generated_nothing(step)):
        return step
    return dataclasses.replace(step, prev_ended_s=prev_ended_s, gap_s=step.arrived_s - prev_ended_s)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A stored step of a shared session that generated something (writer_store.py): its
    end, the ids of the calls any of its choices asked for, and whether this writer
    stored it."""

    ended_s: float
    call_ids: frozenset[str]
    is_own: bool


def with_shared_gap(step: Step, responses: Sequence[StoredResponse]) -> Step:
    """`step` (its gap from the session table) with its previous response found among
    `responses`, the session's stored ones (see the module's docstring): carrying tool
    results, the latest that asked for one of those calls and ended between the table's
    previous response and the step's arrival, if any; else the latest another writer
    stored that ended after the table's and by the arrival. Unchanged where none is, or
    where the table knew no previous response (`with_stored_gap`'s case)."""
    prev_ended_s = step.prev_ended_s
    if prev_ended_s is None:
        return step
    answered = {call.call_id for call in step.after.tools if call.call_id}
    starts = [r.ended_s for r in responses if prev_ended_s <= r.ended_s <= step.arrived_s
              and not answered.isdisjoint(r.call_ids)]
    if not starts:
        starts = [r.ended_s for r in responses if not r.is_own and prev_ended_s < r.ended_s <= step.arrived_s]
    start_s = max(starts, default=prev_ended_s)
    if start_s == prev_ended_s:
        return step
    return dataclasses.replace(step, prev_ended_s=start_s, gap_s=step.arrived_s - start_s)


def with_prefix(content: CapturedContent, prefix_step: int | None) -> CapturedContent:
    """`content` extending the step stored under `prefix_step`; None: where that step is
    stored is not known, so the request's messages are kept whole (or, where the content
    lacks them, none rebuilt: export leaves them out)."""
    if prefix_step == content.prefix_step:
        return content
    if prefix_step is not None:
        return dataclasses.replace(content, prefix_step=prefix_step)
    num_prefix = content.num_prefix_messages
    if len(content.all_messages) < num_prefix:
        return dataclasses.replace(content, prefix_step=None)
    return dataclasses.replace(content, new_messages=tuple(content.all_messages[:num_prefix]) + tuple(
        content.new_messages), num_prefix_messages=0, prefix_step=None)


def numbered(key: tuple[str, str], session: OpenSession, step: Step, pending: dict[tuple[str, str, int], int],
             batch: list[tuple[tuple[str, str], int]]) -> tuple[Step, bool, PlacedPrefix | None]:
    """`step` with the index it asks the store for, and its content's `prefix_step`
    where that step is stored (its content whole where that is unknown); whether
    that prefix is a step of this batch (the store follows it if it moves); the prefix
    as an earlier write placed it (None: not placed, or of this batch), which the store
    checks is still there (`content_rows.content_row`: a delete may have removed it, and
    another writer reused its index). `pending`
    ((tenant, session, own index) -> index asked for) and `batch` ((session key, own
    index), in order) gain the step: the writer's batch being made."""
    own_index = step.index
    index = own_index + session.index_offset
    content = step.content
    prefix_in_batch, placed = False, None
    if content is not None and content.prefix_step is not None:
        prefix = pending.get((*key, content.prefix_step))
        prefix_in_batch = prefix is not None
        if not prefix_in_batch:
            prefix = session.prefix_index(content.prefix_step)
            if prefix is not None:
                placed = session.placed_steps.get(content.prefix_step)
        content = with_prefix(content, prefix)
    batch.append((key, own_index))
    pending[(*key, own_index)] = index
    if index != own_index or content is not step.content:
        step = dataclasses.replace(step, index=index, content=content)
    return step, prefix_in_batch, placed
