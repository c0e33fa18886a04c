"""A step's prompt as block fingerprints: which requests shared which prefixes, without
their content.

The prompt's token ids are cut into blocks of `RECORD_BLOCK_SIZE` (the last may be
partial) and chained with the engine's tenant-salted block hash (`cache.hashing`), so
two prompts get equal leading ids exactly as far as they share a prefix (barring a
64-bit collision) and two tenants (or two models: the tracer salts with the step's model
too) never share an id. Each id is the hash's top 53 bits,
exact in every JSON reader. These are `stepahead-trace/1`'s `hash_ids` (with
`block_size` = RECORD_BLOCK_SIZE): an exported trace replays, or runs through the cache
simulator, with the recorded sharing. Invariant: `len(ids) == ceil(len(token_ids) /
RECORD_BLOCK_SIZE)`.
"""
from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Sequence

from cache.hashing import chain_hashes, hash_block, tenant_salt

RECORD_BLOCK_SIZE = 64
_DROP_BITS = 64 - 53


def prompt_block_ids(tenant: str, token_ids: Sequence[int],
                     block_size: int = RECORD_BLOCK_SIZE, model: str | None = None) -> list[int]:
    """One fingerprint per block of the prompt, in order (the full blocks hashed as the
    engine hashes them, the partial last one chained after them). With `model`, the salt is
    the model's too: each model has a prefix cache of its own, so a session's step on
    another model never shares (nor is counted as having lost) the last one's prefix."""
    salt = tenant_salt(tenant)
    if model is not None:
        salt = hashlib.blake2b(salt + model.encode("utf-8"), digest_size=16).digest()
    hashes = chain_hashes(token_ids, block_size, salt)
    num_hashed = len(hashes) * block_size
    if num_hashed < len(token_ids):
        hashes.append(hash_block(hashes[-1] if hashes else None, token_ids[num_hashed:], salt))
    return [block_hash >> _DROP_BITS for block_hash in hashes]


def num_blocks(num_tokens: int, block_size: int = RECORD_BLOCK_SIZE) -> int:
    return -(-num_tokens // block_size)


def shared_prefix_tokens(before: Sequence[int] | None, after: Sequence[int] | None,
                         num_tokens: int, block_size: int = RECORD_BLOCK_SIZE) -> int | None:
    """How many of a prompt's `num_tokens` an earlier prompt already held as its leading
    blocks (`before`, `after`: their fingerprints): the tokens a prefix cache could have
    served had it kept the earlier prompt. The block holding the prompt's last token never
    counts (a prefix cache computes that token again, for its logits), so any engine
    whose block size divides `block_size` can serve all of it. None when either has no
    fingerprints."""
    if before is None or after is None:
        return None
    num_equal = 0
    for earlier, later in zip(before, after):
        if earlier != later:
            break
        num_equal += 1
    return min(num_equal, max(0, num_tokens - 1) // block_size) * block_size


def evicted_prefix_tokens(shared: int | None, num_cached: int) -> int:
    """Of the `shared` tokens a step's previous prompt left it, those the cache no longer
    served (`num_cached` counts the step's cached tokens); 0 when `shared` is unknown."""
    return 0 if shared is None else max(0, shared - num_cached)


MAX_KEPT_PROMPTS = 8


class PreviousPrompt:
    """One session's steps, walked in order: what each one's previous *successful* prompt
    left it (`shared_prefix_tokens`). A failed step's prompt may never have reached the
    cache, so the step after it is compared with the last prompt that did; nor could the
    prompt of a step still running when this one arrived (a fan-out, parallel tool results
    sent as separate requests): a step is compared with the prompt of the latest step (by
    index) that had ended by its arrival, as its gap runs from the last response that
    ended before it arrived. The same rule serves the live count, the store's steps and
    its stats.

    Kept: the prompts a step may still be compared with, as `(index, ended_s,
    fingerprints)`, index and end both rising (a prompt of a step that ended no sooner
    than a later step is never the latest ended by any time: not kept); at most
    MAX_KEPT_PROMPTS, packed, 8 bytes a block (the tracer keeps one per live session; a
    session with no step in flight keeps just its latest prompt: `forget_before`). Past
    that, the second oldest goes: the oldest is the one the steps of a fan-out wider than
    the cap, all arrived before any of them ended, are compared with, and a step that
    arrived after a dropped prompt ended is compared with an older one, never with one it
    could not have found cached. A step that arrived before every kept prompt's end gets
    None (unknown).

    Nor could a step find cached a prompt that ended before the gateway process serving
    it started (`cache_since_s`; the prefix caches live in that process's memory): its
    shared tokens still count, its evicted ones are unknown (`reuse_in_walk`). The live
    count never meets such a prompt (a process's tracer starts with none kept); the
    store's steps each record their gateway's start (`steps.gateway_started_s`)."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: list[tuple[int, float, array]] = []

    def add(self, index: int, ended_s: float, blocks: Sequence[int]) -> None:
        """Keep a successful step's prompt, in index order; prompts it outdates go."""
        position = len(self.kept)
        while position > 0 and self.kept[position - 1][0] > index:
            position -= 1
        if position < len(self.kept) and self.kept[position][1] <= ended_s:
            return   # a later step ended first: this prompt is never the latest ended
        while position > 0 and self.kept[position - 1][1] >= ended_s:
            position -= 1
            del self.kept[position]
        self.kept.insert(position, (index, ended_s, array("q", blocks)))
        if len(self.kept) > MAX_KEPT_PROMPTS:   # the oldest stays: a fan-out's steps in flight need it (QA201 F1)
            del self.kept[1]

    def forget_before(self, since_s: float) -> None:
        """Drop the prompts no step arriving at or after `since_s` is compared with."""
        newest = self._latest_ended_by(since_s)
        if newest > 0:
            del self.kept[:newest]

    def shared_with(self, blocks: Sequence[int] | None, num_tokens: int, is_ok: bool, *,
                    index: int, arrived_s: float, ended_s: float) -> int | None:
        """The tokens of this step's prompt (`blocks`, `num_tokens`) the previous
        successful prompt (of a step ended by `arrived_s`) began with, or None; a
        successful step's prompt is then kept (ending at `ended_s`)."""
        return self._compared(blocks, num_tokens, is_ok, index, arrived_s, ended_s)[0]

    def reuse_in_walk(self, blocks: Sequence[int] | None, num_tokens: int, num_cached: int, is_ok: bool, *,
                      index: int, arrived_s: float, ended_s: float,
                      cache_since_s: float | None) -> tuple[int | None, int | None]:
        """`shared_with` for the store's steps walked in index order, which is their order
        of arrival (the prompts no later step is compared with then go: `forget_before`),
        with, of the shared tokens, those the cache no longer served (`num_cached` counts
        the step's cached tokens): None where the shared tokens are unknown, the step
        failed, or the previous prompt ended before `cache_since_s` (the start of the
        gateway process that served the step: its caches never held that prompt, so
        nothing was evicted; None: not recorded, compared as before)."""
        shared, previous_ended_s = self._compared(blocks, num_tokens, is_ok, index, arrived_s, ended_s)
        self.forget_before(arrived_s)
        if shared is None or not is_ok or (cache_since_s is not None and previous_ended_s < cache_since_s):
            return shared, None
        return shared, evicted_prefix_tokens(shared, num_cached)

    def _compared(self, blocks: Sequence[int] | None, num_tokens: int, is_ok: bool, index: int,
                  arrived_s: float, ended_s: float) -> tuple[int | None, float | None]:
        """`shared_with`'s tokens, and the end of the prompt they were compared with (None:
        none was)."""
        chosen = self._latest_ended_by(arrived_s, index)
        _, previous_ended_s, previous_blocks = self.kept[chosen] if chosen >= 0 else (None, None, None)
        shared = shared_prefix_tokens(previous_blocks, blocks, num_tokens)
        if is_ok and blocks is not None:
            self.add(index, ended_s, blocks)
        return shared, previous_ended_s

    def _latest_ended_by(self, at_s: float, before_index: float = math.inf) -> int:
        """Where the latest kept prompt of a step before `before_index` that ended by `at_s`
        is; -1: none."""
        for position in range(len(self.kept) - 1, -1, -1):
            kept_index, kept_ended_s, _ = self.kept[position]
            if kept_index < before_index and kept_ended_s <= at_s:
                return position
        return -1
