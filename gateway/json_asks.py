"""What the leaf filler (gateway/json_filling.py) asks the model: one `Ask` per kind of
question, each a continuation of the text so far (`JsonText`) through a `Generate`
callback, short and stopped where the value ends.

Invariant: each ask's `max_tokens` is small and fixed (a reply's asks are bounded by the
values it writes), and its stops end the value it asks for.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

MAX_STRING_TOKENS = 48

# Continue the prompt text `suffix` (appended after the rendered prompt) and return the
# generated text; the callback owns sampling, usage accounting and cancellation.
Generate = Callable[[str, int, tuple[str, ...]], Awaitable[str]]
# Whether a `Generate` call may still reach the model (false once the reply's token budget
# is spent: it would answer "" at once).
CanAsk = Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Ask:
    """One question to the model: continue the text so far and `opener` for at most
    `max_tokens` tokens, up to one of `stop`."""

    opener: str
    max_tokens: int
    stop: tuple[str, ...]


BRANCH_ASK = Ask("", 2, (",", "}", "\n"))   # the first characters of an `anyOf`/`oneOf` value
MORE_ITEMS_ASK = Ask("", 2, ("]",))   # whether an array goes on (`,`)
STRING_REST_ASK = Ask("", MAX_STRING_TOKENS, ('"',))   # the rest of a string the model began
LEAF_ASKS = {"string": Ask('"', MAX_STRING_TOKENS, ('"',)), "integer": Ask("", 8, (",", "}", "\n")),
             "number": Ask("", 8, (",", "}", "\n")), "boolean": Ask("", 2, (",", "}"))}
ENUM_ASK = Ask("", 16, (",", "}", "\n"))


@dataclass(slots=True)
class JsonText:
    """The text the JSON follows in the model's context (`head`), and the JSON so far."""

    head: str
    json: str = ""

    @property
    def text(self) -> str:
        return self.head + self.json
