"""`truncation: "auto"` of the Responses API: a conversation too long for the model's
context loses its oldest turns, whole, until it fits (`responses_routes.prepared_chat`).

Invariant: a turn is cut whole (from a user message through the message before the next
one), so a tool call never loses its result, and the last turn is never cut. The fewest
turns whose cut makes the prompt fit are found with O(log n) preparations (doubling, then
halving), not one per turn: each preparation renders the whole conversation, so cutting
one turn at a time took 48–57 s for 1,000 turns (QA141).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from gateway.errors import ApiError

Outcome = TypeVar("Outcome")


def oldest_turn(messages: list[dict]) -> slice | None:
    """`truncation: "auto"`: the messages of the oldest turn — the first message after the
    leading system messages, through the message before the next user message — so a
    tool call never loses its result; None when only the last turn is left."""
    first = next((i for i, m in enumerate(messages) if m.get("role") not in ("system", "developer")), None)
    if first is None:
        return None
    following = next((i for i in range(first + 1, len(messages)) if messages[i].get("role") == "user"), None)
    return None if following is None else slice(first, following)


def without(items: list, cut: slice) -> list:
    return items[:cut.start] + items[cut.stop:]


@dataclass(frozen=True, slots=True)
class TurnCuts:
    """Where the oldest turns of a conversation end. Invariant: cutting the `k` oldest
    turns one `oldest_turn` at a time leaves `items[:first] + items[ends[k - 1]:]` (each
    cut starts where the first did, at a user message, and ends before the next one)."""
    first: int
    ends: tuple[int, ...]

    @classmethod
    def of(cls, messages: list[dict]) -> TurnCuts:
        cut = oldest_turn(messages)
        if cut is None:
            return cls(0, ())
        return cls(cut.start, tuple(i for i in range(cut.start + 1, len(messages)) if messages[i].get("role") == "user"))

    def kept(self, items: list, num_cut: int) -> list:
        """`items` (the messages, or anything parallel to them) with the `num_cut` oldest turns cut."""
        return items if num_cut == 0 else items[:self.first] + items[self.ends[num_cut - 1]:]


def is_too_long(error: ApiError) -> bool:
    """Whether cutting turns may cure `error`: the messages past the context (not
    `max_output_tokens` alone filling it)."""
    return error.code == "context_length_exceeded" and error.param == "messages"


async def fewest_turns_cut(cuts: TurnCuts,
                           outcome_of: Callable[[int], Awaitable[Outcome]]) -> tuple[int, Outcome | ApiError]:
    """(k, what `outcome_of(k)` gave: its value or the ApiError it raised) for the fewest
    turns `k` ≥ 1 whose cut leaves no `is_too_long` error, or for k = all of them when
    none does; as cutting one turn at a time would stop, while fewer turns cut leave the
    prompt no shorter (each turn's cut only shortens it)."""
    outcomes: dict[int, Outcome | ApiError] = {}

    async def fits(num_cut: int) -> bool:
        try:
            outcomes[num_cut] = await outcome_of(num_cut)
        except ApiError as error:
            outcomes[num_cut] = error
        found = outcomes[num_cut]
        return not (isinstance(found, ApiError) and is_too_long(found))

    too_long, probe = 0, 1   # too_long: the most turns known to leave the prompt too long
    while not await fits(probe):
        too_long = probe
        if probe == len(cuts.ends):
            return probe, outcomes[probe]
        probe = min(2 * probe, len(cuts.ends))
    fitting = probe
    while fitting - too_long > 1:
        middle = (too_long + fitting) // 2
        if await fits(middle):
            fitting = middle
        else:
            too_long = middle
    return fitting, outcomes[fitting]
