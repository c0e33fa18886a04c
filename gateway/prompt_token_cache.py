"""Prompt token ids that reuse the ids of a tenant's earlier prompt sharing a prefix.

An agent's every step sends the whole conversation again: the rendered prompt is the
last one plus a reply and a tool result. Tokenizing it whole costs ~4 µs a token here
(about 35 ms at 8,600 tokens, on every step). Fast tokenizers split the text at added
tokens (`<|im_start|>`, `<|im_end|>`, ...) before anything else, so the ids of the
text up to the end of such a token do not depend on what follows it: the ids of an
earlier prompt up to its last added token inside the shared prefix are kept, and only
the rest is tokenized.

A chat prompt comes as marked text (`marked=True`, shards/special_text.py): the special
tokens its client strings spell stand there as marks, which are tokenized as plain text.
Its cuts are still only where the template wrote an added token, and a marked prompt
without a mark is an ordinary text.

Invariants:
- `encode(tenant, text)` equals `tokenizer.encode(text, add_special_tokens=False)`, and
  `encode(tenant, text, marked=True)` equals `MarkedTextEncoder.encode(text)`;
  the splice is only used for tokenizers whose added tokens strip nothing around them
  and are matched on the raw text, and every `check_every`-th splice (the first few
  always) is compared with a whole encode: one difference turns the cache off for good;
- a tenant's prompts are spliced only from that tenant's earlier prompts;
- at most `max_entries` prompts, holding at most about `max_bytes` of text and ids, are
  kept (the oldest go first); one tenant keeps at most its share of `max_entries` among
  the tenants kept, and never fewer than `entries_per_tenant`; a prompt that continues a
  kept one (the same agent's next step) takes its place, so a tenant keeps about one
  prompt per session in flight;
- finding the kept prompt a new one continues costs about the same however many the
  tenant keeps: kept prompts are indexed by where their last added token ends, and
  only the new prompt's last added tokens are looked up there (`PROBED_CUTS`); when none
  is continued, the `SCANNED_ENTRIES` newest are searched for the longest shared cut.

The cost of `encode` is linear in the text it tokenizes (the part after the cut, plus a
whole encode when a splice is compared); `bound` says, once per tokenizer, how few tokens
a text can be (gateway/prompt_bounds.py): callers refuse by it a prompt certainly past the
context before they tokenize it, which costs seconds and gigabytes for megabytes of text.

NOTE: thread-safe (the gateway tokenizes in worker threads): the lookup and the insert
hold a lock; tokenizing does not, and it releases the GIL (`encode_releasing_gil`, or
`tokenizer.encode`, which goes through `encode_batch`): the event loop runs meanwhile.
"""
from __future__ import annotations

import bisect
import itertools
import logging
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from gateway.prompt_bounds import PromptBound
from gateway.prompt_text_scan import last_cuts, shared_prefix_length
from shards.special_text import MARK, MarkedTextEncoder, encode_releasing_gil

logger = logging.getLogger("stepahead.gateway")

ALWAYS_CHECKED = 4   # the first splices are compared with a whole encode
PROBED_CUTS = 64       # a new prompt's last added tokens looked up for the prompt it continues
SCANNED_ENTRIES = 16   # a tenant's newest prompts searched when it continues none


@dataclass(slots=True)
class _Tokenized:
    """A prompt, its ids, and where it may be cut: `cut_chars[i]` is the offset just
    after an added token, `cut_ids[i]` the number of ids up to there (both ascending)."""
    text: str
    ids: array
    cut_chars: list[int]
    cut_ids: list[int]


@dataclass(slots=True)
class PromptTokenStats:
    num_encoded: int = 0          # prompts asked for
    num_spliced: int = 0          # ... that reused an earlier prompt's ids
    num_reused_ids: int = 0       # ids taken from earlier prompts, not tokenized again
    num_checked: int = 0          # splices compared with a whole encode
    disabled: str | None = None   # why the splice is off, if it is


@dataclass(slots=True)
class PromptTokenCache:
    """Prompt ids for one tokenizer (one per local model); see the module docstring."""
    tokenizer: object
    entries_per_tenant: int = 64
    max_entries: int = 4096
    max_bytes: int = 64 << 20
    check_every: int = 32
    stats: PromptTokenStats = field(default_factory=PromptTokenStats)
    _entries: OrderedDict = field(default_factory=OrderedDict)   # (tenant, seq) -> _Tokenized, oldest first
    _per_tenant: dict = field(default_factory=dict)              # tenant -> {its keys: None}, oldest first
    _by_last_cut: dict = field(default_factory=dict)             # (tenant, last cut_chars) -> [keys]
    _cut_texts: dict = field(default_factory=dict)               # added token id -> its text, of those seen at cuts
    _cut_token_ids: frozenset = frozenset()
    _adds_special_tokens: bool = False
    _marked: MarkedTextEncoder | None = None   # tokenizes marked text (a chat prompt with client special text)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: int = 0
    _num_bytes: int = 0
    bound: PromptBound | None = None   # the fewest tokens a text can be, to refuse one past the context untokenized

    def __post_init__(self) -> None:
        self.bound = PromptBound.of(self.tokenizer)
        self._cut_token_ids, reason = _cut_tokens(self.tokenizer)
        self._marked = MarkedTextEncoder.of(self.tokenizer)
        self.stats.disabled = reason
        sample = "a"
        self._adds_special_tokens = (list(self.tokenizer.encode(sample))
                                     != list(self.tokenizer.encode(sample, add_special_tokens=False)))

    @property
    def marked_encoder(self) -> MarkedTextEncoder | None:
        """The encoder of marked text the cache tokenizes with (made once: making one copies
        the tokenizer's backend), for a caller that tokenizes such text apart from it."""
        return self._marked

    def encode(self, tenant: str, text: str, add_special_tokens: bool = False, *, marked: bool = False) -> list[int]:
        """The ids of `text`, as `tokenizer.encode(text, add_special_tokens=...)` gives
        them (a tokenizer that adds tokens around every text, a BOS, is asked whole); of
        marked `text` (a chat prompt, never with `add_special_tokens`), as
        `MarkedTextEncoder.encode` gives them. Kept prompts hold only marked texts' MARKs:
        a text that is not marked but holds one is tokenized whole."""
        if marked and add_special_tokens:
            raise ValueError("a marked prompt is tokenized without added special tokens")
        if (add_special_tokens and self._adds_special_tokens) or self.stats.disabled is not None \
                or (not marked and MARK in text):
            return self._whole(text, add_special_tokens, marked)
        with self._lock:
            self.stats.num_encoded += 1
            cut_texts = tuple(self._cut_texts.values())
        probed = last_cuts(text, cut_texts, PROBED_CUTS)   # outside the lock: scans the text
        with self._lock:
            base_key, base, cut, continues = self._longest_cut(tenant, text, probed)
        if base is None:
            tokenized = self._tokenize(text, None, 0)
        else:
            tokenized = self._tokenize(text, base, cut)
            whole = self._whole_if_the_splice_differs(tokenized, cut, marked)
            if whole is not None:
                return whole
        with self._lock:
            self._remember(tenant, tokenized, base_key if continues else None)
        return tokenized.ids.tolist()

    def _longest_cut(self, tenant: str, text: str,
                     last_cuts: list[int]) -> tuple[tuple | None, _Tokenized | None, int, bool]:
        """The tenant's kept prompt sharing the longest cuttable prefix with `text`: its
        key, itself, the index of that cut in it, and whether `text` continues it whole
        (caller holds the lock). First the kept prompts whose last cut is at one of
        `last_cuts` (where `text`'s last added tokens end, descending): the first that
        `text` continues whole is the answer (an agent's last step). Else the newest
        `SCANNED_ENTRIES`, newest first, for the longest shared cut."""
        for chars in last_cuts:
            for key in self._by_last_cut.get((tenant, chars), ()):
                entry = self._entries[key]
                if len(entry.text) <= len(text) and text.startswith(entry.text):
                    return key, entry, len(entry.cut_chars) - 1, True
        best_key, best, best_cut, best_chars, continues = None, None, -1, 0, False
        for key in itertools.islice(reversed(self._per_tenant.get(tenant, {})), SCANNED_ENTRIES):
            entry = self._entries[key]
            whole = len(entry.text) <= len(text) and text.startswith(entry.text)
            shared = len(entry.text) if whole else shared_prefix_length(entry.text, text)
            cut = bisect.bisect_right(entry.cut_chars, shared) - 1
            if cut >= 0 and entry.cut_chars[cut] > best_chars:
                best_key, best, best_cut, best_chars, continues = key, entry, cut, entry.cut_chars[cut], whole
            if whole:
                break
        return best_key, best, best_cut, continues

    def _whole(self, text: str, add_special_tokens: bool, marked: bool) -> list[int]:
        if marked:
            return self._marked.encode(text)
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def _tokenize(self, text: str, base: _Tokenized | None, cut: int) -> _Tokenized:
        """`text` tokenized from `base`'s cut `cut` on (all of it when `base` is None); a
        text holding a MARK is marked text (`encode` lets no other one through)."""
        start_chars = base.cut_chars[cut] if base is not None else 0
        start_ids = base.cut_ids[cut] if base is not None else 0
        ids = array("i", base.ids[:start_ids]) if base is not None else array("i")
        cut_chars = base.cut_chars[:cut + 1] if base is not None else []
        cut_ids = base.cut_ids[:cut + 1] if base is not None else []
        new_ids, cut_at, cut_ends = self._new_ids(text[start_chars:])
        cut_chars.extend(start_chars + end for end in cut_ends)
        cut_ids.extend(start_ids + index + 1 for index in cut_at)
        ids.extend(new_ids)
        with self._lock:
            for index in cut_at:   # the added tokens prompts are cut at, to find them in the next
                token_id = new_ids[index]
                if token_id not in self._cut_texts:
                    self._cut_texts[token_id] = self.tokenizer.added_tokens_decoder[token_id].content
            if base is not None:
                self.stats.num_spliced += 1
                self.stats.num_reused_ids += start_ids
        return _Tokenized(text, ids, cut_chars, cut_ids)

    def _new_ids(self, text: str) -> tuple[list[int], list[int], list[int]]:
        """The ids of `text` (from a cut on), and the index of each cut token among them
        and where it ends in `text`; with a MARK, `text` is marked (client special text)."""
        cut_tokens = self._cut_token_ids
        if MARK in text:
            pieces = self._marked.pieces(text)
            cuts = [(index, end) for index, end in zip(pieces.added_at, pieces.added_ends)
                    if pieces.ids[index] in cut_tokens]
            return pieces.ids, [index for index, _ in cuts], [end for _, end in cuts]
        encoding = encode_releasing_gil(self.tokenizer.backend_tokenizer, text)   # the loop runs meanwhile
        new_ids = encoding.ids
        cut_at = [index for index, token_id in enumerate(new_ids) if token_id in cut_tokens]
        # NOTE: the cut tokens' offsets only: `encoding.offsets` builds a tuple per token (~0.3 µs
        # and ~70 bytes each, a third of this call's own cost on a long prompt)
        return new_ids, cut_at, [encoding.token_to_chars(index)[1] for index in cut_at]

    def _whole_if_the_splice_differs(self, tokenized: _Tokenized, cut: int, marked: bool) -> list[int] | None:
        """Compare some splices with a whole encode: None when not compared or equal, else
        the whole encode's ids (the answer), and splicing is turned off."""
        with self._lock:
            if self.stats.num_spliced > ALWAYS_CHECKED and self.stats.num_spliced % self.check_every:
                return None
            self.stats.num_checked += 1
        whole = self._whole(tokenized.text, False, marked)
        if whole == tokenized.ids.tolist():
            return None
        with self._lock:
            self.stats.disabled = "a spliced prompt differed from its whole encode"
            self._entries.clear()
            self._per_tenant.clear()
            self._by_last_cut.clear()
            self._num_bytes = 0
        logger.warning("prompt token cache off: a spliced prompt differed from its whole encode "
                       "(cut %d of %d characters)", tokenized.cut_chars[cut], len(tokenized.text))
        return whole

    def _remember(self, tenant: str, tokenized: _Tokenized, continued: tuple | None) -> None:
        """Keep `tokenized` as the tenant's newest prompt, in place of the kept prompt it
        continues (`continued`, its key, if still kept); caller holds the lock."""
        if self.stats.disabled is not None or not tokenized.cut_chars:
            return
        if continued is not None and continued in self._entries:
            self._forget(continued)
        own = self._per_tenant.get(tenant)
        if own is not None and len(own) >= self._tenant_share(tenant):
            self._forget(next(iter(own)))
        size = _size(tokenized)
        if size > self.max_bytes:
            return
        while len(self._entries) >= self.max_entries or self._num_bytes + size > self.max_bytes:
            self._forget(next(iter(self._entries)))
        self._seq += 1
        key = (tenant, self._seq)
        self._entries[key] = tokenized
        self._per_tenant.setdefault(tenant, {})[key] = None
        self._by_last_cut.setdefault((tenant, tokenized.cut_chars[-1]), []).append(key)
        self._num_bytes += size

    def _tenant_share(self, tenant: str) -> int:
        """How many prompts `tenant` may keep: its share of `max_entries` among the
        tenants kept (itself counted), at least `entries_per_tenant`."""
        num_tenants = len(self._per_tenant) + (tenant not in self._per_tenant)
        return max(self.entries_per_tenant, self.max_entries // num_tenants)

    def _forget(self, key: tuple[str, int]) -> None:
        entry = self._entries.pop(key)
        self._num_bytes -= _size(entry)
        own = self._per_tenant[key[0]]
        del own[key]
        if not own:
            del self._per_tenant[key[0]]
        index_key = (key[0], entry.cut_chars[-1])
        same_end = self._by_last_cut[index_key]
        same_end.remove(key)
        if not same_end:
            del self._by_last_cut[index_key]


def _size(tokenized: _Tokenized) -> int:
    """About what `tokenized` holds in memory, in bytes (its text taken as 1 byte a
    character, as an ASCII str is)."""
    return len(tokenized.text) + tokenized.ids.itemsize * len(tokenized.ids) + 16 * len(tokenized.cut_chars)


def _cut_tokens(tokenizer) -> tuple[frozenset, str | None]:
    """The ids of added tokens a prompt may be cut after, or why none may be."""
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return frozenset(), "the tokenizer is not a fast (Rust) tokenizer"
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    cuttable = frozenset(token_id for token_id, token in added.items()
                         if not (token.lstrip or token.rstrip or token.single_word or token.normalized))
    if not cuttable:
        return frozenset(), "the tokenizer has no added token that splits the text cleanly"
    return cuttable, None
