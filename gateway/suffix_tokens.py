"""The token ids of a growing text (a structured reply's JSON written so far), found with
work that follows what was added, not the whole text: see `SuffixTokens`.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
from dataclasses import dataclass, field

logger = logging.getLogger("stepahead.gateway")

SPLICE_MARGIN_CHARS = 16   # tokens ending this close to where a text grew are tokenized again
SYNC_TOKENS = 4            # tokens before those, tokenized again too, that must come out the same
MAX_BOUNDARY_STEPS = 8     # tokens stepped back at most to start on a whole character
CHUNK_CHARS = 4096         # a longer new part is tokenized this much at a time, the loop's turn between
CHECKED_SPLICES = 8        # a suffix's first splices are compared with a whole encode (if short)
WHOLE_MAX_CHARS = 8192     # without splices, a text up to this long is tokenized whole


@dataclass(slots=True)
class SuffixTokens:
    """The ids of a continuation's growing suffix (the JSON written so far): each text
    usually extends the last, so only its new part is tokenized, with a few tokens before it.

    With a fast tokenizer (`backend_tokenizer`, whose offsets place each token) the ids are
    those of a whole `encode(text, add_special_tokens=False)`: the tokens ending at least
    SPLICE_MARGIN_CHARS before where the text grew are kept, and the text from SYNC_TOKENS
    of them back is tokenized again; those SYNC_TOKENS must come out as they were (so the
    tokenizer is back in step there), and the first CHECKED_SPLICES splices (of texts up to
    CHUNK_CHARS) are compared with a whole encode too. A tokenizer that fails either check
    (one whose pieces depend on text far away: a normalizer that prepends to every text,
    say), or one without offsets, gets a text up to WHOLE_MAX_CHARS tokenized whole, as
    before, and a longer one the new part's own ids appended: its count is exact for the
    ids sent, so the context is never overrun.

    Invariants: the characters tokenized per call are the new part plus a bounded window
    (`num_chars_tokenized` counts them), or at most WHOLE_MAX_CHARS, and a text that does
    not extend the last is tokenized from its start; a new part longer than CHUNK_CHARS is
    tokenized a chunk at a time, giving the event loop its turn between chunks.
    """

    tokenizer: object
    text: str = ""
    ids: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)   # each token's first character (spliced texts)
    ends: list[int] = field(default_factory=list)     # each token's end (spliced texts)
    splices: bool = True    # False: the new part's own ids are appended
    num_splices: int = 0
    num_chars_tokenized: int = 0

    def __post_init__(self) -> None:
        self.splices = getattr(self.tokenizer, "backend_tokenizer", None) is not None

    async def encode(self, text: str, limit: int) -> list[int] | None:
        """The ids of `text` (the list is this object's: copy it to keep it), or None once
        more than `limit` of them are sure (the rest of a long text is not tokenized)."""
        if not text.startswith(self.text):
            self._restart()
        while len(text) - len(self.text) > CHUNK_CHARS:
            self._extend(text[:len(self.text) + CHUNK_CHARS])
            if self._num_sure() > limit:
                return None
            await asyncio.sleep(0)   # the loop's turn: other requests, a client gone
        self._extend(text)
        return self.ids

    def _restart(self) -> None:
        self.text, self.ids, self.starts, self.ends = "", [], [], []

    def _num_sure(self) -> int:
        """Ids every longer text that extends this one keeps (as `_extend` splices)."""
        if not self.splices:
            return len(self.ids)
        stable = bisect.bisect_right(self.ends, len(self.text) - SPLICE_MARGIN_CHARS)
        return max(0, stable - SYNC_TOKENS - MAX_BOUNDARY_STEPS)

    def _kept(self) -> int | None:
        """How many tokens to keep: SYNC_TOKENS before the last one ending SPLICE_MARGIN_CHARS
        before the text's end, stepped back to a token that starts a character; None when
        there is no such token."""
        stable = bisect.bisect_right(self.ends, len(self.text) - SPLICE_MARGIN_CHARS)
        kept = stable - SYNC_TOKENS
        for _ in range(MAX_BOUNDARY_STEPS):
            if kept <= 0:
                return None
            if self.starts[kept] >= self.ends[kept - 1]:
                return kept
            kept -= 1
        return None

    def _extend(self, text: str) -> None:
        """`text` (which extends `self.text`, else is tokenized from its start) tokenized."""
        if not text.startswith(self.text):
            self._restart()
        if not self.splices:
            whole = len(text) <= WHOLE_MAX_CHARS
            new = text if whole else text[len(self.text):]
            self.num_chars_tokenized += len(new)
            new_ids = list(self.tokenizer.encode(new, add_special_tokens=False)) if new else []
            if whole:
                self.ids[:] = new_ids
            else:
                self.ids.extend(new_ids)
            self.text = text
            return
        kept = self._kept() if self.text else 0
        if kept is None:
            if len(self.text) > 4 * SPLICE_MARGIN_CHARS:
                self._stop_splicing(text, "no token to restart at")
                return
            kept = 0
        start = self.ends[kept - 1] if kept else 0
        num_sync = bisect.bisect_right(self.ends, len(self.text) - SPLICE_MARGIN_CHARS) - kept if kept else 0
        encoding = self.tokenizer.backend_tokenizer.encode(text[start:], add_special_tokens=False)
        self.num_chars_tokenized += len(text) - start
        ids = encoding.ids
        starts = [start + first for first, _ in encoding.offsets]
        ends = [start + end for _, end in encoding.offsets]
        if kept and (ids[:num_sync] != self.ids[kept:kept + num_sync]
                     or ends[:num_sync] != self.ends[kept:kept + num_sync]):
            self._stop_splicing(text, "its tokens changed before where the text grew")
            return
        del self.ids[kept:], self.starts[kept:], self.ends[kept:]
        self.ids.extend(ids)
        self.starts.extend(starts)
        self.ends.extend(ends)
        self.text = text
        self.num_splices += bool(kept)
        if kept and self.num_splices <= CHECKED_SPLICES and len(text) <= CHUNK_CHARS:
            whole = self.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
            self.num_chars_tokenized += len(text)
            if whole != self.ids:
                self.ids[:] = whole
                self.splices = False   # the ids are right: the next text goes on from them
                logger.info("Tokenizing JSON suffixes piece by piece: a spliced encode differed from a whole one.")

    def _stop_splicing(self, text: str, why: str) -> None:
        """From now on append each new part's own ids (the ids so far stand for `self.text`)."""
        logger.info("Tokenizing JSON suffixes piece by piece: %s.", why)
        self.splices = False
        self._extend(text)
