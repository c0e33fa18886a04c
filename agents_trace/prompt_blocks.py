"""A step's prompt as block fingerprints: which requests shared which prefixes, without
their content.

The prompt's token ids are cut into blocks of `RECORD_BLOCK_SIZE` (the last may be
partial) and chained with the engine's tenant-salted block hash (`cache.hashing`), so
two prompts get equal leading ids exactly as far as they share a prefix (barring a
64-bit collision) and two tenants never share an id. Each id is the hash's top 53 bits,
exact in every JSON reader. These are `stepahead-trace/1`'s `hash_ids` (with
`block_size` = RECORD_BLOCK_SIZE): an exported trace replays, or runs through the cache
simulator, with the recorded sharing. Invariant: `len(ids) == ceil(len(token_ids) /
RECORD_BLOCK_SIZE)`.
"""
from __future__ import annotations

from collections.abc import Sequence

from cache.hashing import hash_blocks, tenant_salt

RECORD_BLOCK_SIZE = 64
_DROP_BITS = 64 - 53


def prompt_block_ids(tenant: str, token_ids: Sequence[int],
                     block_size: int = RECORD_BLOCK_SIZE) -> list[int]:
    """One fingerprint per block of the prompt, in order."""
    blocks = [token_ids[start:start + block_size] for start in range(0, len(token_ids), block_size)]
    return [block_hash >> _DROP_BITS for block_hash in hash_blocks(blocks, tenant_salt(tenant))]


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
