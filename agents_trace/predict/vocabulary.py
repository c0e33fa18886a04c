"""A tenant's step alphabet: symbol <-> dense id, with an out-of-vocabulary bucket.

Invariants: ids are 0..size-1; the three base symbols (`USER`, `ASSISTANT_TEXT`, `END`)
are always present, so every tenant can say "the user speaks", "a text answer", "the
session ends" even before it has seen them; the last id is always `OOV_SYMBOL`, the
bucket every unseen symbol maps to, so encoding never raises. Tools are spelled by
`cache.forecast.tool_step`, so no tool name equals a base symbol or a bucket's (`<...>`).

A tenant's vocabulary names at most `MAX_TOOL_SYMBOLS` tools (`cap_tools`): the most
frequent; the rest share the one `OTHER_TOOL_SYMBOL`, and a vocabulary that holds it
encodes every unknown symbol there instead of in the OOV bucket (an unknown symbol is a
tool: the base symbols are always known). The cap bounds a fit's arrays, whose n-gram
table is contexts x V, whatever names a tenant's clients send. What a tenant keeps per
tool name (its count, its gap statistics) is bounded too, at `MAX_KNOWN_TOOLS` names
(tenant.py), and a step's tool name at `MAX_CLIENT_ID_CHARS` characters (`step_symbol`).
Among equally used tools a cold tenant's capped vocabulary keeps the first seen
(tenant_forecasts.py: a new name never displaces a known one, so costs no rebuild); a
fit's keeps them by name.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from cache.forecast import ASSISTANT_TEXT_SYMBOL, END_SYMBOL, TOOL_ESCAPE, USER_SYMBOL

OOV_SYMBOL = "<oov>"
OTHER_TOOL_SYMBOL = "<other tool>"
BASE_SYMBOLS = (USER_SYMBOL, ASSISTANT_TEXT_SYMBOL, END_SYMBOL)
# Real agents call a few to a few dozen tools (MedAgentBench 9, BFCL's richest sessions
# about 40, large MCP setups under 200); 256 leaves room for all of them while a fit's
# n-gram table stays below ~(3 x 261) x 261 floats (~1.6 MB).
MAX_TOOL_SYMBOLS = 256
# A tenant keeps the counts and gap statistics of at most this many tool names, the most
# used; the others' are pooled under OTHER_TOOL_SYMBOL (tenant.py), so its memory and
# saved files stay bounded however many names its clients send (QA188: 6,400 kept).
MAX_KNOWN_TOOLS = 4 * MAX_TOOL_SYMBOLS


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
    def unknown_id(self) -> int:
        """Where an unknown symbol goes: `OTHER_TOOL_SYMBOL` when the vocabulary was capped,
        else the OOV bucket."""
        return self.index.get(OTHER_TOOL_SYMBOL, len(self.symbols) - 1)

    @property
    def end_id(self) -> int:
        return self.index[END_SYMBOL]

    def encode_one(self, symbol: str) -> int:
        """The id of `symbol`, or `unknown_id` when it is unknown."""
        found = self.index.get(symbol)
        return self.unknown_id if found is None else found

    def encode(self, sequence: Sequence[str]) -> list[int]:
        unknown = self.unknown_id
        return [self.index.get(s, unknown) for s in sequence]

    def contains(self, symbol: str) -> bool:
        return symbol in self.index and symbol != OOV_SYMBOL and symbol != OTHER_TOOL_SYMBOL


def cap_tools(tool_counts: Mapping[str, int], cap: int = MAX_TOOL_SYMBOLS,
              rank: Callable[[tuple[str, int]], Any] | None = None) -> dict[str, str]:
    """The tools past the `cap` first by `rank` (default `tool_rank`: the most frequent,
    ties by name), each mapped to `OTHER_TOOL_SYMBOL`; empty when there are at most `cap`."""
    if len(tool_counts) <= cap:
        return {}
    kept = {name for name, _ in heapq.nsmallest(cap, tool_counts.items(), key=rank or tool_rank)}
    return {name: OTHER_TOOL_SYMBOL for name in tool_counts if name not in kept}


def tool_rank(item: tuple[str, int]) -> tuple[int, str]:
    """The key `cap_tools` ranks a (name, count) by, the first kept first."""
    return -item[1], item[0]


def capped_sequences(sequences: Sequence[Sequence[str]], cap: int = MAX_TOOL_SYMBOLS
                     ) -> list[list[str]]:
    """`sequences` with the tools past the `cap` most frequent spelled `OTHER_TOOL_SYMBOL`."""
    counts = Counter(s for seq in sequences for s in seq if s not in BASE_SYMBOLS)
    rare = cap_tools(counts, cap)
    if not rare:
        return [list(seq) for seq in sequences]
    return [[rare.get(s, s) for s in seq] for seq in sequences]


def step_symbol(symbol: str) -> str:
    """`symbol` with its tool name cut to MAX_CLIENT_ID_CHARS, as the trace store cuts it
    (`tool_step`'s escape kept; a name kept whole is unchanged, and no cut name is a base
    symbol's or starts otherwise than it did)."""
    if len(symbol) <= MAX_CLIENT_ID_CHARS:
        return symbol
    escape = len(TOOL_ESCAPE) if symbol.startswith(TOOL_ESCAPE) else 0
    return symbol[:escape + MAX_CLIENT_ID_CHARS]


def with_end(sequence: Sequence[str]) -> list[str]:
    """The sequence with `END` appended unless it already ends with it."""
    out = list(sequence)
    if not out or out[-1] != END_SYMBOL:
        out.append(END_SYMBOL)
    return out
