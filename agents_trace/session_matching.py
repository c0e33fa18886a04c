"""How the session table finds the step a request goes on from (sessions.py's rules):
the index entries (`StepRef`) and the lookups over them, a mixin of `SessionTable`.

Invariant: every lookup is scoped to the caller's tenant and to live sessions; none
changes the table. The rules themselves (longest match, exact before loose, the tool
results deciding where the prefix leaves a doubt) are stated in sessions.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents_trace.conversation import call_id_digest, is_assistant
from agents_trace.records import SessionId

if TYPE_CHECKING:
    from agents_trace.sessions import SessionState

SessionKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class StepRef:
    """A finished step whose conversation later requests may extend."""

    tenant: str
    session: SessionId
    index: int
    num_messages: int


class StepMatching:
    """Lookups of `SessionTable` over its `_live` sessions and its `_by_response`,
    `_by_request` and `_by_call` indexes (digest -> StepRefs)."""

    __slots__ = ()

    def _pick(self, tenant: str, refs: list[StepRef] | None,
              prefer: frozenset[SessionKey] = frozenset(), agent: str | None = None,
              ) -> StepRef | None:
        """The tenant's live candidate: one of a session in `prefer` first, then one of a
        session no step of which went on from it yet, then one of a session whose agent
        is the request's `agent` (where both are known), then the latest step of its
        session, then the most recently active session's. So two identical runs (the same
        replies) each keep their own session, also when their next steps overlap. O(refs)."""
        best: StepRef | None = None
        best_rank = (False, False, False, False, -1.0)
        for ref in refs or ():
            state = self._live.get((ref.tenant, ref.session))
            if ref.tenant != tenant or state is None:
                continue
            rank = (bool(prefer) and (ref.tenant, ref.session) in prefer,
                    _latest_base(state) <= ref.index,
                    agent is not None and state.agent == agent,
                    state.head_index == ref.index, state.last_active_s)
            if best is None or rank > best_rank:
                best, best_rank = ref, rank
        return best

    def _stitch(self, tenant: str, digests: Sequence[bytes], messages: Sequence[Any],
                agent: str | None) -> tuple[StepRef | None, StepRef | None]:
        """The step whose conversation the request extends (None for a call-id match) and
        the step whose session it continues (None: a new session), by sessions.py's rules."""
        matched, is_exact, rivals = self._match(tenant, digests, messages, agent)
        if matched is not None and is_exact and len(rivals) <= 1:
            return matched, matched
        answered, asking = self._match_answered(tenant, messages, agent)   # NOTE: rare, the tool results may decide
        if matched is not None and asking:
            matched = self._pick(tenant, rivals, asking, agent)
            if not is_exact and (matched.tenant, matched.session) not in asking:
                matched = None   # a loose match gives way to the session whose calls are answered
        return matched, matched or answered

    def _match(self, tenant: str, digests: Sequence[bytes], messages: Sequence[Any],
               agent: str | None = None) -> tuple[StepRef | None, bool, list[StepRef]]:
        """The step this conversation extends, whether exactly, and the candidates it was
        picked from: the longest match, exact before loose."""
        for i in range(len(messages) - 2, 0, -1):
            if not is_assistant(messages[i]):
                continue
            refs = self._by_response.get(digests[i])
            ref = self._pick(tenant, refs, agent=agent)
            if ref is not None and ref.num_messages == i:
                return ref, True, refs
            refs = self._by_request.get(digests[i - 1])
            ref = self._pick(tenant, refs, agent=agent)
            if ref is not None and ref.num_messages == i:
                return ref, False, refs
        return None, False, []

    def _match_answered(self, tenant: str, messages: Sequence[Any], agent: str | None = None,
                        ) -> tuple[StepRef | None, frozenset[SessionKey]]:
        """The step that asked for a call whose result follows the request's last
        assistant message (the last such result whose call is known decides), and every
        live session of the tenant that asked for one of those results' calls. O(results)."""
        decided: StepRef | None = None
        asking: set[SessionKey] = set()
        for message in reversed(messages):
            if is_assistant(message):
                break
            if isinstance(message, dict) and message.get("role") == "tool":
                call_id = message.get("tool_call_id")
                refs = self._by_call.get(call_id_digest(tenant, call_id)) \
                    if isinstance(call_id, str) and call_id else None
                ref = self._pick(tenant, refs, agent=agent)
                if ref is None:
                    continue
                decided = decided or ref
                asking.update((r.tenant, r.session) for r in refs
                              if r.tenant == tenant and (r.tenant, r.session) in self._live)
        return decided, frozenset(asking)


def _latest_base(state: SessionState) -> int:
    """The index of the session's latest step that went on (or may yet go on) from an
    earlier one: its latest opened step (`last_request`, the prefix base), less any that
    ended having generated nothing (a refused turn's retry still counts as the first to
    go on); the latest opened step where that base is unknown. Numbered as the session's
    steps are, so it holds for a named session resumed after expiry too."""
    base = state.last_request
    return base[2] if base is not None else state.num_steps - 1
