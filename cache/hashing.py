"""Chained, tenant-salted block hashes.

A prompt is cut into full blocks of `block_size` token ids. Block i's hash covers the
hash of block i-1 and block i's own token ids, so equal hashes mean (barring a
collision) equal whole prefixes, and a block is only reusable after the same prefix.
The tenant's salt is mixed into the first block only (like vLLM's `cache_salt`): it
changes that hash, and through the chain every later one, so two tenants never share a
block unless they were configured into the same prefix group.

Invariant: the values depend only on the arguments, never on the process (no Python
`hash()`, whose seed differs per process), so a router and its workers, on any machine,
compute the same hashes. Blake2b with an 8-byte digest gives an unsigned 64-bit value.

NOTE: a 64-bit hash can collide; `BlockManager` therefore also stores and compares the
token ids and the exact parent block, so a collision costs a miss, never wrong KV.
"""
from __future__ import annotations

import hashlib
import struct
from typing import NewType, Sequence

BlockHash = NewType("BlockHash", int)

_HASH_PERSON = b"stepahead-block"
_SALT_PERSON = b"stepahead-salt"
_ROOT_TAG = b"R"
_CHILD_TAG = b"C"


def tenant_salt(tenant: str, prefix_group: str | None = None) -> bytes:
    """The 16-byte salt that scopes a tenant's first block.

    Tenants configured into the same `prefix_group` get the group's salt, hence share
    cached prefixes; otherwise the salt is the tenant's own. The two namespaces are
    tagged, so a tenant named like a group never collides with it.
    """
    scope = f"group:{prefix_group}" if prefix_group is not None else f"tenant:{tenant}"
    return hashlib.blake2b(scope.encode("utf-8"), digest_size=16, person=_SALT_PERSON).digest()


def hash_block(parent: BlockHash | None, token_ids: Sequence[int], salt: bytes) -> BlockHash:
    """Hash of one block given its parent's hash (None for the first block).

    The salt is used only when `parent` is None; later blocks inherit it through the
    parent hash. Token ids are encoded as little-endian signed 64-bit integers.
    """
    digest = hashlib.blake2b(digest_size=8, person=_HASH_PERSON)
    if parent is None:
        digest.update(_ROOT_TAG)
        digest.update(struct.pack("<I", len(salt)))
        digest.update(salt)
    else:
        digest.update(_CHILD_TAG)
        digest.update(struct.pack("<Q", parent))
    num_tokens = len(token_ids)
    digest.update(struct.pack(f"<I{num_tokens}q", num_tokens, *token_ids))
    return BlockHash(int.from_bytes(digest.digest(), "little"))


def split_blocks(token_ids: Sequence[int], block_size: int) -> list[tuple[int, ...]]:
    """The token ids of each FULL block, in order; a partial tail block is left out."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    num_full = len(token_ids) // block_size
    return [tuple(token_ids[i * block_size:(i + 1) * block_size]) for i in range(num_full)]


def hash_blocks(blocks: Sequence[Sequence[int]], salt: bytes) -> list[BlockHash]:
    """Chain hashes of already split blocks: element i hashes blocks[0..i]."""
    hashes: list[BlockHash] = []
    parent: BlockHash | None = None
    for block in blocks:
        parent = hash_block(parent, block, salt)
        hashes.append(parent)
    return hashes


def chain_hashes(token_ids: Sequence[int], block_size: int, salt: bytes) -> list[BlockHash]:
    """One chained hash per FULL block of `token_ids` (the partial tail gets none): the
    values of `hash_blocks(split_blocks(...))`, computed with less Python per block (the
    gateway hashes every prompt on its event loop): the ids are encoded once for the whole
    prompt, and each block's digest starts as a copy of one keyed with the personalisation."""
    return chain_encoded(encode_full_blocks(token_ids, block_size), block_size, salt)


def encode_full_blocks(token_ids: Sequence[int], block_size: int) -> bytes:
    """The ids of the full blocks of `token_ids` as the hashes encode them (little-endian
    signed 64-bit each; `struct.error` past that range)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    num_ids = len(token_ids) // block_size * block_size
    return struct.pack(f"<{num_ids}q", *token_ids[:num_ids])   # faster here than array("q", ...)


def chain_encoded(encoded: bytes, block_size: int, salt: bytes, parent: BlockHash | None = None) -> list[BlockHash]:
    """The chained hashes of encoded full blocks (`encode_full_blocks`), continuing the
    chain after `parent` (None: these blocks start the prompt)."""
    step = 8 * block_size
    length = struct.pack("<I", block_size)
    new_digest = hashlib.blake2b(digest_size=8, person=_HASH_PERSON).copy
    head = (_ROOT_TAG + struct.pack("<I", len(salt)) + salt if parent is None
            else _CHILD_TAG + struct.pack("<Q", parent))
    digests = []
    for start in range(0, len(encoded) - step + 1, step):
        digest = new_digest()
        digest.update(head + length + encoded[start:start + step])
        last = digest.digest()
        digests.append(last)
        head = _CHILD_TAG + last   # the parent's little-endian bytes are its digest
    return [BlockHash(int.from_bytes(last, "little")) for last in digests]
