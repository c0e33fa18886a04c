"""The legacy completions `logprobs` (`/v1/completions`): parallel lists of the tokens,
their log probabilities, the likeliest tokens by name, and each token's `text_offset`.

Invariant: `text_offset[i]` is the index in the choice's `text` of the first character
token i's bytes belong to (a token ending a character another began shares its offset; a
character left unfinished is one U+FFFD, as in the text). Offsets never decrease and never
pass the text's end: a token with no bytes (a special token the text leaves out) sits
where the text is when it comes, and the tokens of a stop string the text was cut before
sit at its end. A stream sends a token's entry once the text before the token has been
sent (else with the choice's last chunk), so a stream's offsets are the whole reply's.
Each scored token is a key of its own position's `top_logprobs` (up to logprobs + 1 keys).
"""
from __future__ import annotations

import codecs

from gateway.backend import TokenChoice


def legacy_token_name(text: str, token_bytes: bytes) -> str:
    """A token as the legacy completions `logprobs` name it: its text, or, when its bytes
    are not whole UTF-8 (a byte-level token splitting an emoji: its text alone is U+FFFD,
    like every other such piece), `bytes:` and their `\\xNN` escapes, as OpenAI names
    them (`bytes:\\xf0\\x9f`), so different pieces stay different keys of `top_logprobs`."""
    try:
        token_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{byte:02x}" for byte in token_bytes)
    return text


def _top_by_name(top: tuple[tuple[str, bytes, float], ...]) -> dict[str, float]:
    """`top_logprobs` of one position, likeliest first; of two tokens with one name the
    likelier's value stays (a later, lower one never overwrites it)."""
    named: dict[str, float] = {}
    for text, token_bytes, logprob in top:
        named.setdefault(legacy_token_name(text, token_bytes), logprob)
    return named


def _top_with_token(choice: TokenChoice, name: str) -> dict[str, float] | None:
    """One position's `top_logprobs`: its likeliest tokens and, as OpenAI and vLLM answer
    ("up to logprobs+1 elements"), the token itself, last when it is not among them (so
    `logprobs: 0` gives the token alone); None for a token with no log probability (an
    echoed prompt's first)."""
    if choice.logprob is None:
        return None
    top = _top_by_name(choice.top)
    top.setdefault(name, choice.logprob)
    return top


def _legacy_lists(choices: list[TokenChoice], offsets: list[int]) -> dict:
    """The legacy `logprobs` of `choices` at `offsets`: the names `tokens` uses key
    `top_logprobs` too, so a position's token is always a key there, with its value."""
    names = [legacy_token_name(c.token, c.token_bytes) for c in choices]
    return {"tokens": names,
            "token_logprobs": [c.logprob for c in choices],
            "top_logprobs": [_top_with_token(c, name) for c, name in zip(choices, names)],
            "text_offset": offsets}


def _continues(pending: bytes, byte: int) -> bool:
    """Whether `byte` goes on the unfinished character `pending` began."""
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(pending + bytes([byte]))
    except UnicodeDecodeError:
        return False
    return True


class TokenStarts:
    """Where each of a choice's tokens, taken in order, begins in the text their bytes
    decode to (invalid bytes as U+FFFD, as the reply's text has them)."""

    __slots__ = ("_decoder", "_num_characters")

    def __init__(self, start: int = 0) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._num_characters = start   # of the bytes taken, less an unfinished character's

    def begin(self, token_bytes: bytes) -> int:
        """The index of the character the first of `token_bytes` belongs to; then takes them."""
        pending = self._decoder.getstate()[0]
        start = self._num_characters
        if pending and token_bytes and not _continues(pending, token_bytes[0]):
            start += 1   # the character begun before stays unfinished: one U+FFFD
        self._num_characters += len(self._decoder.decode(token_bytes))
        return start


def completion_logprobs(choices: list[TokenChoice] | None, text_offset: int = 0,
                        text_length: int | None = None) -> dict | None:
    """A whole completion choice's legacy `logprobs`, its first token at `text_offset`,
    no offset past `text_length` (the choice's text's, when given)."""
    if choices is None:
        return None
    starts = TokenStarts(text_offset)
    offsets = [starts.begin(c.token_bytes) for c in choices]
    if text_length is not None:
        offsets = [min(offset, text_length) for offset in offsets]
    return _legacy_lists(choices, offsets)


class StreamedLogprobs:
    """A streamed completion choice's legacy `logprobs`, chunk by chunk: each token's
    entry goes out with the first chunk by which the text before the token has been sent,
    the rest with the last (`rest`), at most at the text's end."""

    __slots__ = ("_starts", "_waiting", "_num_sent_characters")

    def __init__(self) -> None:
        self._starts = TokenStarts()
        self._waiting: list[tuple[TokenChoice, int]] = []   # (token, its text offset), in order
        self._num_sent_characters = 0

    def chunk(self, text: str, choices: list[TokenChoice] | None) -> dict | None:
        """The `logprobs` of the chunk sending `text` after the tokens `choices` came:
        None when no token was scored and none is due."""
        self._num_sent_characters += len(text)
        for choice in choices or ():
            self._waiting.append((choice, self._starts.begin(choice.token_bytes)))
        num_due = 0
        while num_due < len(self._waiting) and self._waiting[num_due][1] <= self._num_sent_characters:
            num_due += 1
        if choices is None and num_due == 0:
            return None
        due, self._waiting = self._waiting[:num_due], self._waiting[num_due:]
        return _legacy_lists([choice for choice, _ in due], [offset for _, offset in due])

    def rest(self) -> dict | None:
        """The entries still waiting when the choice ends (a stop string's tokens), at the
        text's end; None when none is."""
        if not self._waiting:
            return None
        waiting, self._waiting = self._waiting, []
        return _legacy_lists([choice for choice, _ in waiting],
                             [min(offset, self._num_sent_characters) for _, offset in waiting])
