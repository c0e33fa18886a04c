"""`truncation: "auto"` of the Responses API: a conversation too long for the model's
context loses its oldest turns, whole, until it fits (`responses_routes.prepared_chat`);
when the last turn alone is still too long — an agent loop: one user message, then tool
round after tool round (QA209 F1) — its oldest tool rounds go next, after its opening
message(s).

Invariant: a turn is cut whole (from a user message, or user messages in a row, through
the message before the next), and a tool round whole (an assistant message through the
tool results after it, up to the next message after a result), so a tool call never
loses its result nor a result its call; the last turn's opening message(s) and its newest
round are never cut.
The fewest cuts that make the prompt fit are found with O(log n) preparations (doubling,
then halving), not one per cut: each preparation renders the whole conversation, so
cutting one turn at a time took 48–57 s for 1,000 turns (QA141).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from gateway.errors import ApiError

Outcome = TypeVar("Outcome")


def _turn_starts(messages: list[dict], after: int) -> list[int]:
    """Where the turns after index `after` start: at a user message that follows no user
    message (user messages in a row open one turn: a task, then "go ahead", QA217 F1)."""
    return [i for i in range(after + 1, len(messages))
            if messages[i].get("role") == "user" and messages[i - 1].get("role") != "user"]


def _first_after_instructions(messages: list[dict]) -> int | None:
    """The index of the first message after the leading system and developer messages."""
    return next((i for i, m in enumerate(messages) if m.get("role") not in ("system", "developer")), None)


def oldest_turn(messages: list[dict]) -> slice | None:
    """`truncation: "auto"`: the messages of the oldest turn — the first message after the
    leading system messages, through the message before the next turn's first user
    message — so a tool call never loses its result; None when only the last turn is left."""
    first = _first_after_instructions(messages)
    if first is None:
        return None
    following = _turn_starts(messages, first)
    return slice(first, following[0]) if following else None


def without(items: list, cut: slice) -> list:
    return items[:cut.start] + items[cut.stop:]


@dataclass(frozen=True, slots=True)
class TurnCuts:
    """Where the oldest turns of a conversation end, then the last turn's tool rounds.
    Invariant: cutting the `k` ≤ len(ends) oldest turns one `oldest_turn` at a time leaves
    `items[:first] + items[ends[k - 1]:]` (each cut starts where the first did, at a user
    message, and ends before the next one); cutting all of them and `r` rounds leaves
    `items[:first] + items[last:head] + items[rounds[r - 1]:]`, where `last` is where the
    last turn starts, `head` where its first round does (its first assistant message), and
    `rounds` where each later round starts (the first message after a tool result that is
    no tool result). Each cut keeps a subset
    of what the one before kept, so the prompt only shortens."""
    first: int
    ends: tuple[int, ...]
    head: int = 0
    rounds: tuple[int, ...] = ()

    @classmethod
    def of(cls, messages: list[dict]) -> TurnCuts:
        first = _first_after_instructions(messages)
        if first is None:
            return cls(0, ())
        ends = tuple(_turn_starts(messages, first))
        last = ends[-1] if ends else first
        head = next((i for i in range(last + 1, len(messages)) if messages[i].get("role") == "assistant"), None)
        if head is None:
            return cls(first, ends)
        # a round starts at the first message after a tool result that is none (QA217 F2: a
        # developer message there opens the next round, never joining it to the one before)
        rounds = tuple(i for i in range(head + 1, len(messages))
                       if messages[i].get("role") != "tool" and messages[i - 1].get("role") == "tool")
        return cls(first, ends, head, rounds)

    @property
    def num_cuts(self) -> int:
        """How many cuts there are to make: the turns before the last, then its rounds but the newest."""
        return len(self.ends) + len(self.rounds)

    def kept(self, items: list, num_cut: int) -> list:
        """`items` (the messages, or anything parallel to them) with the `num_cut` oldest
        turns, then rounds, cut."""
        if num_cut == 0:
            return items
        if num_cut <= len(self.ends):
            return items[:self.first] + items[self.ends[num_cut - 1]:]
        last = self.ends[-1] if self.ends else self.first
        return items[:self.first] + items[last:self.head] + items[self.rounds[num_cut - len(self.ends) - 1]:]


def is_too_long(error: ApiError) -> bool:
    """Whether cutting turns may cure `error`: the messages past the context (not
    `max_output_tokens` alone filling it)."""
    return error.code == "context_length_exceeded" and error.param == "messages"


async def fewest_turns_cut(cuts: TurnCuts,
                           outcome_of: Callable[[int], Awaitable[Outcome]]) -> tuple[int, Outcome | ApiError]:
    """(k, what `outcome_of(k)` gave: its value or the ApiError it raised) for the fewest
    cuts `k` ≥ 1 (`TurnCuts.kept`) that leave no `is_too_long` error, or for k = all of
    them when none does; as cutting one at a time would stop, while fewer cuts leave the
    prompt no shorter (each cut only shortens it)."""
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
        if probe == cuts.num_cuts:
            return probe, outcomes[probe]
        probe = min(2 * probe, cuts.num_cuts)
    fitting = probe
    while fitting - too_long > 1:
        middle = (too_long + fitting) // 2
        if await fits(middle):
            fitting = middle
        else:
            too_long = middle
    return fitting, outcomes[fitting]
