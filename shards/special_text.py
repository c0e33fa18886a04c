"""Client text that spells a special token (`<|im_end|>`) stays text in the prompt.

A chat prompt is the chat template rendered around the client's strings: message
content, names, tool calls' names and arguments, tool definitions. The special tokens the
template writes (`<|im_start|>`, `<|im_end|>`) are control tokens; the same characters
inside a client string must be ordinary text tokens, or a tool's output could close its
turn and open a forged system or assistant turn (what HF calls `split_special_tokens`,
applied to the client's strings only). Added tokens that are not special (`<think>` in
some vocabularies) are matched in client text as in the model's own replies.

How: every client string is *marked* before rendering (`SpecialText.mark`): each special
token's text in it becomes MARK and a code character, and MARK itself becomes MARK MARK.
The rendered *marked text* spells special tokens only where the template wrote them.
`MarkedTextEncoder` tokenizes it: the text is split at its added tokens as the tokenizer
splits it; a piece holding a mark is unmarked and tokenized with special-token matching
off, and every other piece keeps the ids of the whole encode.

Invariants:
- marked text without MARK is the prompt text itself and its ids are exactly
  `tokenizer.encode(text, add_special_tokens=False)`: ordinary content is tokenized as
  before, with nothing but a scan for MARK added;
- `unmark(mark(s)) == s` for every string, and a special token's text from a client
  string is never encoded as that token;
- the ids up to the end of an added token of a marked text do not depend on what follows
  (pieces are tokenized apart), so the prompt token cache still cuts there;
- a fast tokenizer's backend tokenizes with the GIL released (`encode_releasing_gil`): a
  prompt is tokenized in a worker thread, and megabytes take seconds, which the gateway's
  event loop (every tenant's streams) must not wait out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MARK = "\ufdd0"          # a Unicode noncharacter: not for interchange, so client text rarely holds one
FIRST_CODE = 0xF0000     # codes: Supplementary Private Use Area-A (case filters and tojson keep them)
_MARKS = re.compile(MARK + "(.)", re.DOTALL)


def encode_releasing_gil(backend, text: str):
    """`backend.encode(text, add_special_tokens=False)` for a `tokenizers.Tokenizer`: the
    same Encoding (ids, offsets), tokenized with the GIL released. `Tokenizer.encode` holds
    the GIL for the whole call (a 2 M-character prompt: 2-3 s in which no other Python
    thread runs, the event loop included); `encode_batch` lets go of it while it tokenizes
    (FI157, measured with tokenizers 0.23: longest event-loop gap 2-3 s vs ~20 ms).
    NOTE: reading `Encoding.offsets` builds a tuple per token with the GIL held (~0.3 s for
    2 M tokens): read the few offsets needed with `token_to_chars`."""
    return backend.encode_batch([text], add_special_tokens=False)[0]


@dataclass(frozen=True, slots=True)
class SpecialText:
    """The texts of a tokenizer's special tokens, longest first, and how client strings
    holding them (or MARK) are marked."""
    texts: tuple[str, ...]
    found: re.Pattern | None   # the texts (NOTE: one regex search, fast when they share a first character)
    pattern: re.Pattern        # the texts and MARK

    @classmethod
    def of(cls, tokenizer) -> SpecialText:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        texts = {token.content for token in added.values() if token.special and token.content}
        texts.update(text for text in (getattr(tokenizer, "all_special_tokens", None) or ()) if text)
        ordered = tuple(sorted(texts, key=lambda text: (-len(text), text)))
        found = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        return cls(ordered, found, re.compile("|".join(map(re.escape, ordered + (MARK,)))))

    def mark(self, value: Any) -> Any:
        """A copy of `value` (a string, or dicts and lists of them: messages, tool
        definitions) with every string, dict keys included, marked (a string with nothing
        to mark is the same object)."""
        found = self.found.search if self.found is not None else (lambda text: None)
        mark_string = self.mark_string

        def walk(item: Any) -> Any:   # NOTE: exact types first: this walks every request's messages
            kind = type(item)
            if kind is str:
                return item if MARK not in item and found(item) is None else mark_string(item)
            if kind is dict:
                return {walk(key): walk(inner) for key, inner in item.items()}
            if kind is list or kind is tuple:
                return [walk(inner) for inner in item]
            return mark_string(item) if isinstance(item, str) else item   # a str subclass (an enum's value)

        return walk(value)

    def mark_string(self, text: str) -> str:
        if MARK not in text and (self.found is None or self.found.search(text) is None):
            return text
        return self.pattern.sub(self._code, text)

    def unmark(self, text: str) -> str:
        """The text a marked text stands for (a lone MARK, if a template cut a pair, stays)."""
        return _MARKS.sub(self._text_of_code, text) if MARK in text else text

    def _code(self, match: re.Match) -> str:
        found = match.group(0)
        return MARK + MARK if found == MARK else MARK + chr(FIRST_CODE + self.texts.index(found))

    def _text_of_code(self, match: re.Match) -> str:
        code = match.group(1)
        if code == MARK:
            return MARK
        index = ord(code) - FIRST_CODE
        return self.texts[index] if 0 <= index < len(self.texts) else match.group(0)


@dataclass(frozen=True, slots=True)
class MarkedPieces:
    """A marked text's ids, and for each added token among them its index in `ids` and
    the offset in the marked text just after it."""
    ids: list[int]
    added_at: list[int]
    added_ends: list[int]


@dataclass(frozen=True, slots=True)
class MarkedTextEncoder:
    """Tokenizes marked text for one tokenizer (one per local model: `of` copies the fast
    tokenizer's backend once, with special-token matching off, so no encode ever flips a
    setting that other threads' encodes read)."""
    tokenizer: object
    special: SpecialText
    plain_backend: object | None   # None: not a fast tokenizer (its encode takes split_special_tokens)
    added_ids: frozenset

    @classmethod
    def of(cls, tokenizer) -> MarkedTextEncoder:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        plain = None
        if backend is not None:
            from tokenizers import Tokenizer

            plain = Tokenizer.from_str(backend.to_str())
            plain.encode_special_tokens = True
        added = frozenset((getattr(tokenizer, "added_tokens_decoder", None) or {}).keys())
        return cls(tokenizer, SpecialText.of(tokenizer), plain, added)

    def encode(self, text: str) -> list[int]:
        """The ids of marked `text` (no tokens added around it)."""
        if MARK not in text:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.plain_backend is None:
            return self._encode_slow(text)
        return self.pieces(text).ids

    def pieces(self, text: str) -> MarkedPieces:
        """The ids of marked `text` and where its added tokens are (a fast tokenizer's)."""
        encoding = encode_releasing_gil(self.tokenizer.backend_tokenizer, text)
        whole_ids = encoding.ids
        ids: list[int] = []
        added_at: list[int] = []
        added_ends: list[int] = []
        piece_start, piece_first = 0, 0   # the piece since the last added token: its offset, its first id
        for index in [i for i, token_id in enumerate(whole_ids) if token_id in self.added_ids] + [None]:
            start, end = (len(text), len(text)) if index is None else encoding.token_to_chars(index)
            piece = text[piece_start:start]
            if MARK in piece:
                ids.extend(encode_releasing_gil(self.plain_backend, self.special.unmark(piece)).ids)
            else:
                ids.extend(whole_ids[piece_first:len(whole_ids) if index is None else index])
            if index is not None:
                added_at.append(len(ids))
                added_ends.append(end)
                ids.append(whole_ids[index])
                piece_start, piece_first = end, index + 1
        return MarkedPieces(ids, added_at, added_ends)

    def _encode_slow(self, text: str) -> list[int]:
        """A tokenizer without a Rust backend: the text split at the special tokens' texts
        (none of them the client's), each piece with a mark tokenized with them split."""
        ids: list[int] = []
        for piece in re.split("(" + "|".join(map(re.escape, self.special.texts)) + ")", text) \
                if self.special.texts else [text]:
            if piece in self.special.texts:
                ids.append(self.tokenizer.convert_tokens_to_ids(piece))
            elif MARK in piece:
                ids.extend(self.tokenizer.encode(self.special.unmark(piece), add_special_tokens=False,
                                                 split_special_tokens=True))
            elif piece:
                ids.extend(self.tokenizer.encode(piece, add_special_tokens=False))
        return ids
