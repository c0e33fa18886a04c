"""How the session table finds the step a request goes on from (sessions.py's rules):
the index entries (`StepRef`) and the lookups over them, a mixin of `SessionTable`.

Invariant: every lookup is scoped to the caller's tenant and to live sessions; none
changes the table. The rules themselves (longest match, exact before loose, the tool
results deciding where the prefix leaves a doubt) are stated in sessions.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents_trace.conversation import call_id_digest, is_assistant
from agents_trace.records import SessionId

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
              prefer: frozenset[SessionKey] = frozenset()) -> StepRef | None:
        """The tenant's live candidate: one of a session in `prefer` first, then the
        latest step of its session, then the most recently active session's."""
        best: StepRef | None = None
        best_rank = (False, False, -1.0)
        for ref in refs or ():
            state = self._live.get((ref.tenant, ref.session))
            if ref.tenant != tenant or state is None:
                continue
            rank = (bool(prefer) and (ref.tenant, ref.session) in prefer,
                    state.head_index == ref.index, state.last_active_s)
            if best is None or rank > best_rank:
                best, best_rank = ref, rank
        return best

    def _match(self, tenant: str, digests: Sequence[bytes], messages: Sequence[Any],
               ) -> tuple[StepRef | None, bool, list[StepRef]]:
        """The step this conversation extends, whether exactly, and the candidates it was
        picked from: the longest match, exact before loose."""
        for i in range(len(messages) - 2, 0, -1):
            if not is_assistant(messages[i]):
                continue
            refs = self._by_response.get(digests[i])
            ref = self._pick(tenant, refs)
            if ref is not None and ref.num_messages == i:
                return ref, True, refs
            refs = self._by_request.get(digests[i - 1])
            ref = self._pick(tenant, refs)
            if ref is not None and ref.num_messages == i:
                return ref, False, refs
        return None, False, []

    def _match_answered(self, tenant: str, messages: Sequence[Any],
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
                ref = self._pick(tenant, refs)
                if ref is None:
                    continue
                decided = decided or ref
                asking.update((r.tenant, r.session) for r in refs
                              if r.tenant == tenant and (r.tenant, r.session) in self._live)
        return decided, frozenset(asking)
