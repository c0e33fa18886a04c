"""Which conversations have a response running on them (`POST /v1/responses` with
`conversation`), per tenant, in this gateway.

A conversation is one sequence of turns: a response reads its items as its history and
appends its own when it ends. Two at once each read the history without the other's turn
and both appended theirs: a call answered twice, or a call followed by another turn before
its answer, left the conversation refusing every later turn (QA105). As OpenAI's does, a
second response on a conversation while one runs is refused: a 400 `conversation_locked`
(param `conversation`), to retry once the first has ended. So is adding or deleting an item
through the Conversations API meanwhile (`check_items_free`; param `conversation_id`): an
item added between a `function_call` and the turn that answers it, or a call deleted under
its output, left the conversation refusing every later turn too (QA154). What changes no
item is not held back: reading it, setting its metadata, and deleting it (the running
turn's items are then dropped when it ends; nothing is left to refuse a later turn). A
held conversation is never the one the tenant's LRU evicts (`held_by`, read by
`POST /v1/conversations`; QA154): its turn's items would be dropped the same way.

Invariant: a (tenant, conversation) is held by at most one response at a time, from before
its history is read until its items were appended or it ended without them; each hold is
released once (`ConversationHold.release`, idempotent). Held in memory: gateways sharing
one conversations file do not see each other's holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gateway.errors import ApiError, invalid_request


CONVERSATION_LOCKED = "conversation_locked"


def conversation_locked(conversation_id: str) -> ApiError:
    return invalid_request(f"Another response is running on conversation '{conversation_id}'; a conversation takes "
                           "one turn at a time. Retry once it has ended.", param="conversation",
                           code=CONVERSATION_LOCKED)


def items_locked(conversation_id: str) -> ApiError:
    return invalid_request(f"A response is running on conversation '{conversation_id}'; its items cannot be added "
                           "or deleted until that turn has ended (its items are appended then). Retry once it has "
                           "ended.", param="conversation_id", code=CONVERSATION_LOCKED)


@dataclass(slots=True)
class ConversationHold:
    """One response's hold on its conversation; `release()` ends it (again: nothing). A
    request on no conversation holds `nothing()`, which `release()` leaves as it is."""

    locks: "ConversationLocks | None"
    key: tuple[str, str] | None
    is_released: bool = False

    @classmethod
    def nothing(cls) -> "ConversationHold":
        return cls(None, None, is_released=True)

    def release(self) -> None:
        if not self.is_released:
            self.is_released = True
            self.locks.held.discard(self.key)


@dataclass(slots=True)
class ConversationLocks:
    held: set[tuple[str, str]] = field(default_factory=set)   # (tenant, conversation id)

    def take(self, tenant: str, conversation_id: str | None) -> ConversationHold:
        """Hold the tenant's conversation (None: no conversation, `ConversationHold.nothing`);
        a 400 `conversation_locked` when a response holds it."""
        if conversation_id is None:
            return ConversationHold.nothing()
        key = (tenant, conversation_id)
        if key in self.held:
            raise conversation_locked(conversation_id)
        self.held.add(key)
        return ConversationHold(self, key)

    def held_by(self, tenant: str) -> frozenset[str]:
        """The ids of the tenant's conversations a response holds now, for the archive's
        LRU to leave alone. Read just before the store call that creates a conversation,
        with no await between: a hold taken later reads its history after that call, so a
        conversation it evicted meanwhile is that response's 404, never a turn dropped."""
        return frozenset(conversation_id for (owner, conversation_id) in self.held if owner == tenant)

    def check_items_free(self, tenant: str, conversation_id: str) -> None:
        """A 400 `conversation_locked` (param `conversation_id`) when a response holds the
        tenant's conversation, for a request that would add or delete its items. Called
        just before that request's store call, with no await between: the store runs calls
        in order, so a turn that takes the hold later reads the items as changed."""
        if (tenant, conversation_id) in self.held:
            raise items_locked(conversation_id)
