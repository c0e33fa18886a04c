"""Exact prefix verification: the rule that makes a hash collision harmless.

A 64-bit block hash can collide, so a hit needs more than an equal hash. Every block
records the lineage id (`uid`) of the exact block it was computed after; a chain is
verified by walking from the first block, which must carry the requester's salt scope,
and requiring each next block to name the previous verified one as its parent (and, when
the caller gives them, to hold equal token ids). By induction every verified block's KV
was computed over exactly the requested prefix.

NOTE: when a parent is dropped and computed again it gets a new uid, so its old
children no longer verify (they are evicted in time, or replaced when re-committed).
Under LRU this does not happen, since a parent is always used more recently than its
children.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash


def same_tokens(stored: tuple[int, ...], given: Sequence[int]) -> bool:
    """Whether a block's stored token ids equal `given` (any sequence type)."""
    return stored == (given if type(given) is tuple else tuple(given))


def continues(block: BlockMeta, parent_uid: LineageId | None, salt: bytes) -> bool:
    """Whether `block` is the child of block `parent_uid` (a first block: of `salt`)."""
    if block.parent_uid != parent_uid:
        return False
    return parent_uid is not None or block.salt == salt


def token_blocks_offset(num_blocks: int, num_token_blocks: int, start: int) -> int:
    """Where a commit's `token_blocks` start in the chain: 0 when there is one per hash,
    `start` when there is one per hash from `start` on; ValueError for a `start` outside
    [0, num_blocks] or any other count."""
    if not 0 <= start <= num_blocks:
        raise ValueError(f"start must lie in [0, {num_blocks}], got {start}")
    if num_token_blocks == num_blocks:
        return 0
    if num_token_blocks == num_blocks - start:
        return start
    raise ValueError("token_blocks must have one entry per hash, or per hash from start on")


def verified_run(
    find: Callable[[BlockHash], BlockMeta | None],
    salt: bytes,
    hashes: Sequence[BlockHash],
    token_blocks: Sequence[Sequence[int]] | None,
    num_blocks: int,
) -> list[BlockMeta]:
    """The registered blocks verifying the leading run of `hashes[:num_blocks]`, in order.

    `find` looks a hash up in the index; `token_blocks`, when given, is aligned with
    `hashes`. The run stops at the first block that does not verify.
    """
    run: list[BlockMeta] = []
    parent_uid: LineageId | None = None
    for i in range(num_blocks):
        block = find(hashes[i])
        if block is None or not continues(block, parent_uid, salt):
            break
        if token_blocks is not None and not same_tokens(block.tokens, token_blocks[i]):
            break
        run.append(block)
        parent_uid = block.uid
    return run
