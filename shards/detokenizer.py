"""Incremental detokenization with stop strings.

Each token decodes a window of the last few tokens, not the whole output: decoding
`token_ids[prefix_offset:]` and `token_ids[prefix_offset:read_offset]` (text already
taken) and keeping the difference costs the same at the 4,000th token as at the 10th
(decoding the whole output every token cost ~0.6 ms a token at 4,000 here). The window
starts a token or more back so the tokenizer sees the context it needs (a leading space
it strips at a decode's start, bytes merging into one character).

Invariant: the concatenation of all emitted deltas equals the final text, and no
emitted text ever contains (or is later followed by text completing) a stop string:
text that could still be the start of a stop string is held back until it cannot.
`_text` is the text of `token_ids[:read_offset]` (up to a stop string), and never ends
inside a multi-byte character until the output ends there.

Stop strings: the text ends where the first stop string to complete begins, as if the
text came one character at a time (when several complete at the same character, the
longest: it begins first), whichever was listed first and however the text was split
into tokens, so the text never holds a stop string. Each stop string is matched with
Knuth–Morris–Pratt (`StopMatcher`), so a token costs work in proportion to its own
text, never to the stop strings' lengths (four 8,000-character stop strings cost
seconds over a few thousand tokens when every token re-searched the held-back text).
"""
from __future__ import annotations

from dataclasses import dataclass, field

REPLACEMENT_CHAR = "\ufffd"


@dataclass(slots=True)
class StopMatcher:
    """One stop string matched against text that arrives piece by piece.

    Invariant: `matched` is the length of the longest tail of the text fed so far that is
    a prefix of `stop`: shorter than `stop` until it completes (that tail is the text to
    hold back for it). `_borders[j]` is the length of the longest proper prefix of
    `stop[:j + 1]` that is also its suffix (Knuth–Morris–Pratt), computed only as far as
    `matched` has reached, so the work is bounded by the text fed, not by the stop's length.
    """
    stop: str
    matched: int = 0
    _borders: list[int] = field(default_factory=lambda: [0])

    def feed(self, piece: str) -> int:
        """Take `piece`; returns the index in it just past where `stop` first completes
        (then `matched == len(stop)`), or -1 (then `matched` is the tail to hold back)."""
        stop, borders, matched = self.stop, self._borders, self.matched
        first, end, i = stop[0], len(piece), 0
        while i < end:
            if matched == 0:
                i = piece.find(first, i)   # nothing matched: skip to where the stop could start
                if i < 0:
                    break
            char = piece[i]
            while matched and stop[matched] != char:
                matched = borders[matched - 1]
            if stop[matched] == char:
                matched += 1
                if matched == len(stop):
                    self.matched = matched
                    return i + 1
                if matched > len(borders):
                    self._extend_borders()
            i += 1
        self.matched = matched
        return -1

    def _extend_borders(self) -> None:
        stop, borders = self.stop, self._borders
        j = len(borders)
        k = borders[j - 1]
        while k and stop[k] != stop[j]:
            k = borders[k - 1]
        borders.append(k + 1 if stop[k] == stop[j] else k)


def stop_start_in(matchers: tuple[StopMatcher, ...], piece: str) -> int | None:
    """`piece` fed to each of `matchers`: where, counted from `piece`'s start, the first stop
    string to complete in it begins (negative when it began in text fed before), the one
    ending first, the longest of those ending together; None when none completes."""
    first: tuple[int, int] | None = None   # (end, -length) of the stop string found
    for matcher in matchers:
        end = matcher.feed(piece)
        if end >= 0 and (first is None or (end, -len(matcher.stop)) < first):
            first = (end, -len(matcher.stop))
    return None if first is None else first[0] + first[1]


@dataclass(slots=True)
class Detokenizer:
    tokenizer: object
    stop: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    num_emitted_chars: int = 0
    stopped: bool = False
    _text: str = ""
    _prefix_offset: int = 0   # the decoded window starts at this token...
    _read_offset: int = 0     # ...and its text up to this token is in `_text` already
    _matchers: tuple[StopMatcher, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        # an empty stop string stops nowhere (the gateway drops it: ChatRequest.stop_list)
        self._matchers = tuple(StopMatcher(stop) for stop in self.stop if stop)

    def resume(self, token_ids: list[int], num_emitted_chars: int) -> None:
        """Go on after `token_ids` whose first `num_emitted_chars` characters of text were
        emitted (by another worker): the tokens go through as they went there, so text
        held back then comes out when safe, as here; `stopped` if their text already
        reached a stop string (nothing more is emitted)."""
        for token_id in token_ids:
            self.push(token_id)
            if self.stopped:
                break
        self.num_emitted_chars = min(num_emitted_chars, len(self._text))

    def push(self, token_id: int) -> str:
        """Add one token; returns the text delta safe to emit now ('' while held back).
        After a stop string is seen, `stopped` is True and the text ends before it (what
        follows adds nothing)."""
        self.token_ids.append(token_id)
        if self.stopped:
            return ""
        piece = self._new_text()
        if piece is None:
            return ""  # an incomplete multi-byte character (or no text yet): wait for the next token
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        return self._accept(piece, is_final=False)

    def flush(self) -> str:
        """The rest of the text at the end of generation. A multi-byte character the last
        tokens left incomplete ends the text as U+FFFD, as decoding the whole output gives,
        so the text always spells every generated byte (up to a stop string)."""
        if self.stopped:
            return self._emit_to(len(self._text))
        piece = self._new_text(is_final=True) or ""
        self._read_offset = len(self.token_ids)
        return self._accept(piece, is_final=True)

    def _new_text(self, is_final: bool = False) -> str | None:
        """The text the tokens after `read_offset` add; None while there is none, or while
        it ends inside a multi-byte character (unless `is_final`)."""
        taken = self._decode(self._prefix_offset, self._read_offset)
        window = self._decode(self._prefix_offset, len(self.token_ids))
        if len(window) <= len(taken) or (window.endswith(REPLACEMENT_CHAR) and not is_final):
            return None
        return window[len(taken):]

    def _decode(self, start: int, end: int) -> str:
        if start == end:
            return ""
        return self.tokenizer.decode(self.token_ids[start:end], skip_special_tokens=True)

    def _accept(self, piece: str, is_final: bool) -> str:
        """Add `piece` (the text the newest tokens decode to) to the text; emit what is safe."""
        start = len(self._text)
        self._text += piece
        cut = self._stop_start(piece, start)
        if cut is not None:
            self.stopped = True
            self._text = self._text[:cut]
            return self._emit_to(cut)
        held_back = 0 if is_final else max((m.matched for m in self._matchers), default=0)
        return self._emit_to(len(self._text) - held_back)

    def _stop_start(self, piece: str, start: int) -> int | None:
        """Where in the text the first stop string to complete within `piece` (added at
        `start`) begins (`stop_start_in`)."""
        at = stop_start_in(self._matchers, piece)
        return None if at is None else start + at

    @property
    def text(self) -> str:
        return self._text

    def _emit_to(self, end: int) -> str:
        if end <= self.num_emitted_chars:
            return ""
        delta = self._text[self.num_emitted_chars:end]
        self.num_emitted_chars = end
        return delta
