"""Known answers and properties of the chained, tenant-salted block hashes."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cache.hashing import chain_hashes, hash_block, hash_blocks, split_blocks, tenant_salt

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tenant_salt_known_answer() -> None:
    assert tenant_salt("acme").hex() == "4e82a9ec8c2d51956cbec7b8a5780876"
    assert tenant_salt("acme", "shared").hex() == "4cf96b79f58449e7ed0ddcc6be2d0c78"


def test_hash_block_known_answer() -> None:
    salt = tenant_salt("acme")
    first = hash_block(None, [1, 2, 3, 4], salt)
    second = hash_block(first, [5, 6, 7, 8], salt)
    assert first == 0xA58558AC13ED1305
    assert second == 0xB51A78EF6A89DD5E


def test_chain_hashes_known_answer_skips_partial_tail() -> None:
    hashes = chain_hashes(list(range(1, 11)), 4, tenant_salt("acme"))
    assert hashes == [0xA58558AC13ED1305, 0xB51A78EF6A89DD5E]


def test_chain_hashes_equals_hashing_block_by_block() -> None:
    """`chain_hashes` encodes the prompt at once; the values are `hash_blocks`' exactly."""
    rng = random.Random(7)
    for _ in range(200):
        block_size = rng.choice([1, 3, 16, 64])
        token_ids = [rng.choice([rng.randrange(50_000), rng.randrange(-2**63, 2**63)])
                     for _ in range(rng.randrange(0, 300))]
        salt = rng.choice([b"", tenant_salt("acme"), tenant_salt("acme", "shared")])
        assert chain_hashes(token_ids, block_size, salt) == hash_blocks(split_blocks(token_ids, block_size), salt)
    with pytest.raises(ValueError):
        chain_hashes([1, 2], 0, b"")


def test_hash_block_is_unsigned_64_bit() -> None:
    salt = tenant_salt("t")
    parent = None
    for i in range(200):
        parent = hash_block(parent, [i, -i, 2**40 + i], salt)
        assert 0 <= parent < 2**64


def test_hash_block_stable_across_processes() -> None:
    script = (
        "from cache.hashing import chain_hashes, tenant_salt;"
        "print(chain_hashes(list(range(1, 11)), 4, tenant_salt('acme')))"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=REPO_ROOT
        )
        outputs.add(result.stdout.strip())
    assert outputs == {str([0xA58558AC13ED1305, 0xB51A78EF6A89DD5E])}


def test_hash_block_salt_only_in_first_block() -> None:
    salt_a, salt_b = tenant_salt("a"), tenant_salt("b")
    assert hash_block(None, [1, 2], salt_a) != hash_block(None, [1, 2], salt_b)
    parent = hash_block(None, [1, 2], salt_a)
    assert hash_block(parent, [3, 4], salt_a) == hash_block(parent, [3, 4], salt_b)


def test_hash_block_depends_on_parent_and_tokens() -> None:
    salt = tenant_salt("a")
    root = hash_block(None, [1, 2], salt)
    other_root = hash_block(None, [1, 3], salt)
    assert root != other_root
    assert hash_block(root, [5, 6], salt) != hash_block(other_root, [5, 6], salt)
    assert hash_block(root, [5, 6], salt) != hash_block(root, [6, 5], salt)
    assert hash_block(root, [5, 6], salt) != hash_block(root, [5, 6, 0], salt)


def test_hash_block_accepts_any_sequence_type() -> None:
    salt = tenant_salt("a")
    expected = hash_block(None, [1, 2, 3], salt)
    assert hash_block(None, (1, 2, 3), salt) == hash_block(None, range(1, 4), salt) == expected


def test_tenant_salt_isolates_tenants_and_shares_groups() -> None:
    assert tenant_salt("a") != tenant_salt("b")
    assert tenant_salt("a", "g") == tenant_salt("b", "g")
    assert tenant_salt("a", "g") != tenant_salt("a")
    assert tenant_salt("g") != tenant_salt("x", "g")


def test_chain_hashes_differ_per_tenant_at_every_block() -> None:
    tokens = list(range(64))
    hashes_a = chain_hashes(tokens, 16, tenant_salt("a"))
    hashes_b = chain_hashes(tokens, 16, tenant_salt("b"))
    assert len(hashes_a) == 4
    assert not set(hashes_a) & set(hashes_b)


def test_chain_hashes_equal_prefix_gives_equal_leading_hashes() -> None:
    salt = tenant_salt("a")
    first = chain_hashes(list(range(48)), 16, salt)
    second = chain_hashes(list(range(32)) + [999] * 16, 16, salt)
    assert first[:2] == second[:2]
    assert first[2] != second[2]


def test_split_blocks_full_blocks_only() -> None:
    assert split_blocks(list(range(7)), 3) == [(0, 1, 2), (3, 4, 5)]
    assert split_blocks([], 3) == []
    assert split_blocks([1, 2], 3) == []


def test_split_blocks_rejects_nonpositive_block_size() -> None:
    with pytest.raises(ValueError):
        split_blocks([1, 2, 3], 0)


def test_hash_blocks_matches_chain_hashes() -> None:
    salt = tenant_salt("a")
    tokens = list(range(40))
    assert hash_blocks(split_blocks(tokens, 8), salt) == chain_hashes(tokens, 8, salt)
