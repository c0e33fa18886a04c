"""Lineage verification: equal hashes are not enough for a hit."""
from __future__ import annotations

from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash
from cache.lineage import continues, same_tokens, verified_run
from cache.tiers import Tier


def _block(
    uid: int, block_hash: int, tokens: tuple[int, ...], parent_uid: int | None, salt: bytes = b"s"
) -> BlockMeta:
    return BlockMeta(
        id=uid,
        tier=Tier.HOT,
        uid=LineageId(uid),
        hash=BlockHash(block_hash),
        tokens=tokens,
        tenant="t",
        salt=salt,
        parent_hash=None,
        parent_uid=None if parent_uid is None else LineageId(parent_uid),
        position=0 if parent_uid is None else 1,
    )


def test_same_tokens_any_sequence_type() -> None:
    assert same_tokens((1, 2), [1, 2])
    assert same_tokens((1, 2), (1, 2))
    assert not same_tokens((1, 2), [2, 1])


def test_continues_checks_salt_only_for_first_block() -> None:
    root = _block(0, 10, (1,), None, salt=b"a")
    child = _block(1, 11, (2,), 0, salt=b"other")
    assert continues(root, None, b"a")
    assert not continues(root, None, b"b")
    assert continues(child, LineageId(0), b"a")
    assert not continues(child, LineageId(5), b"a")
    assert not continues(root, LineageId(0), b"a")


def test_verified_run_stops_at_token_mismatch_and_wrong_parent() -> None:
    root = _block(0, 10, (1,), None)
    child = _block(1, 11, (2,), 0)
    orphan = _block(2, 12, (3,), 99)
    index = {10: root, 11: child, 12: orphan}
    hashes = [BlockHash(10), BlockHash(11), BlockHash(12)]
    assert verified_run(index.get, b"s", hashes, None, 3) == [root, child]
    assert verified_run(index.get, b"s", hashes, [(1,), (2,), (3,)], 3) == [root, child]
    assert verified_run(index.get, b"s", hashes, [(1,), (9,), (3,)], 3) == [root]
    assert verified_run(index.get, b"s", hashes, None, 1) == [root]
    assert verified_run(index.get, b"x", hashes, None, 3) == []
