"""How many text answers a tenant's sessions give before they end.

Agents' sessions end after a number of user turns, not at random: in the recorded BFCL
sessions the odds of ending after the k-th text answer rise from about 1 % at k = 1 to
64 % at k = 5. A step model over symbols cannot count, so its P(END) after a text answer
is nearly the same at every turn. `TurnOdds` counts, over the tenant's finished
sessions, how often the k-th text answer was the last:

    P(END after the k-th answer) = (ended_k + strength * p_model) / (seen_k + strength)

shrunk toward the step model's own probability `p_model` (a tenant with no finished
sessions keeps it exactly); answers past `cap` are pooled at `cap`. A text answer is a
run of silent steps; it *ended* the session when END follows it, *continued* when any
other step does.

Invariant: the counts are exactly those of the sequences added minus those removed.
"""
from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

from cache.forecast import END_SYMBOL


def answer_outcomes(sequence: Sequence[str], silent: Collection[str]) -> Iterator[tuple[int, bool]]:
    """(k, ended) for each text answer of a finished `sequence`, k counting from 1.
    An answer with nothing after it (a sequence cut short) has no outcome."""
    k = 0
    for i, symbol in enumerate(sequence):
        if symbol not in silent or (i > 0 and sequence[i - 1] in silent):
            continue
        k += 1
        j = i + 1
        while j < len(sequence) and sequence[j] in silent:
            j += 1
        if j < len(sequence):
            yield k, sequence[j] == END_SYMBOL


@dataclass(slots=True)
class TurnOdds:
    """Per-answer counts of one tenant's finished sessions (index k - 1, k <= cap)."""

    cap: int = 8
    seen: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError("cap must be at least 1")
        self.seen = [0.0] * self.cap
        self.ended = [0.0] * self.cap

    def add(self, sequence: Sequence[str], silent: Collection[str], weight: float = 1.0) -> None:
        """Count a finished session (`weight` -1 takes one back)."""
        for k, ended in answer_outcomes(sequence, silent):
            index = min(k, self.cap) - 1
            self.seen[index] += weight
            if ended:
                self.ended[index] += weight

    def p_end(self, answers: int, p_model: float, strength: float) -> float:
        """P(the session ends after its `answers`-th text answer)."""
        if answers < 1:
            return p_model
        index = min(answers, self.cap) - 1
        return (self.ended[index] + strength * p_model) / (self.seen[index] + strength)
