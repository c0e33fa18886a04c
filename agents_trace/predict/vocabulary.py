"""A tenant's step alphabet: symbol <-> dense id, with an out-of-vocabulary bucket.

Invariants: ids are 0..size-1; the three base symbols (`USER`, `ASSISTANT_TEXT`, `END`)
are always present, so every tenant can say "the user speaks", "a text answer", "the
session ends" even before it has seen them; the last id is always `OOV_SYMBOL`, the
bucket every unseen symbol maps to, so encoding never raises.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from cache.forecast import END_SYMBOL

USER_SYMBOL = "USER"
ASSISTANT_TEXT_SYMBOL = "ASSISTANT_TEXT"
OOV_SYMBOL = "<oov>"
BASE_SYMBOLS = (USER_SYMBOL, ASSISTANT_TEXT_SYMBOL, END_SYMBOL)


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Immutable symbol table; build it with `Vocabulary.from_sequences`."""

    symbols: tuple[str, ...]
    index: dict[str, int]

    @staticmethod
    def from_symbols(symbols: Iterable[str]) -> "Vocabulary":
        """Sorted known symbols (base symbols always included), then `OOV_SYMBOL` last."""
        known = set(symbols) | set(BASE_SYMBOLS)
        known.discard(OOV_SYMBOL)
        ordered = tuple(sorted(known)) + (OOV_SYMBOL,)
        return Vocabulary(ordered, {s: i for i, s in enumerate(ordered)})

    @staticmethod
    def from_sequences(sequences: Iterable[Sequence[str]]) -> "Vocabulary":
        return Vocabulary.from_symbols(s for seq in sequences for s in seq)

    @property
    def size(self) -> int:
        return len(self.symbols)

    @property
    def oov_id(self) -> int:
        return len(self.symbols) - 1

    @property
    def end_id(self) -> int:
        return self.index[END_SYMBOL]

    def encode_one(self, symbol: str) -> int:
        """The id of `symbol`, or the OOV bucket's id when it is unknown."""
        return self.index.get(symbol, len(self.symbols) - 1)

    def encode(self, sequence: Sequence[str]) -> list[int]:
        oov = len(self.symbols) - 1
        return [self.index.get(s, oov) for s in sequence]

    def contains(self, symbol: str) -> bool:
        return symbol in self.index and symbol != OOV_SYMBOL


def with_end(sequence: Sequence[str]) -> list[str]:
    """The sequence with `END` appended unless it already ends with it."""
    out = list(sequence)
    if not out or out[-1] != END_SYMBOL:
        out.append(END_SYMBOL)
    return out
