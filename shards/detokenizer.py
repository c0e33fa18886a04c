"""Incremental detokenization with stop strings.

Invariant: the concatenation of all emitted deltas equals the final text, and no
emitted text ever contains (or is later followed by text completing) a stop string:
text that could still be the start of a stop string is held back until it cannot.
"""
from __future__ import annotations

from dataclasses import dataclass, field

REPLACEMENT_CHAR = "\ufffd"


@dataclass(slots=True)
class Detokenizer:
    tokenizer: object
    stop: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    num_emitted_chars: int = 0
    stopped: bool = False
    _text: str = ""

    def push(self, token_id: int) -> str:
        """Add one token; returns the text delta safe to emit now ('' while held back).
        After a stop string is seen, `stopped` is True and the text ends before it."""
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith(REPLACEMENT_CHAR):
            return ""  # an incomplete multi-byte character: wait for its next byte
        self._text = text
        for stop in self.stop:
            at = text.find(stop, max(0, self.num_emitted_chars - len(stop) + 1))
            if at >= 0:
                self.stopped = True
                self._text = text[:at]
                return self._emit_to(at)
        return self._emit_to(len(text) - self._held_back(text))

    def flush(self) -> str:
        """The rest of the text at the end of generation."""
        return self._emit_to(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _held_back(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-n:]):
                    longest = n
                    break
        return longest

    def _emit_to(self, end: int) -> str:
        if end <= self.num_emitted_chars:
            return ""
        delta = self._text[self.num_emitted_chars:end]
        self.num_emitted_chars = end
        return delta
