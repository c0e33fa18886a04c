"""SessionHashes: a session's next prompt reuses its last prompt's block hashes, and the
result is always `chain_hashes`' (known answers and a randomized invariant)."""
from __future__ import annotations

import random

import pytest

from cache.hashing import chain_hashes, tenant_salt
from cache.session_hashes import SessionHashes, num_equal_blocks


def test_num_equal_blocks_known_answers():
    a = bytes(range(40))
    assert num_equal_blocks(a, a + b"\x07\x08", 4) == 10
    assert num_equal_blocks(a, a[:13], 4) == 3   # only whole blocks count
    changed = a[:21] + b"\xff" + a[22:]
    assert num_equal_blocks(a, changed, 4) == 5   # byte 21 sits in block 5
    assert num_equal_blocks(a, b"\xff" + a[1:], 4) == 0
    assert num_equal_blocks(b"", a, 4) == 0


def test_a_growing_session_hashes_only_its_new_blocks():
    salt, memo = tenant_salt("t"), SessionHashes(4)
    first, second = list(range(10)), list(range(10)) + [50, 51, 52, 53, 54]
    given = memo.hashes("t", "s", first, salt)
    assert given == chain_hashes(first, 4, salt)
    given[0] = 0   # the caller's list: the memo keeps its own
    assert (memo.num_reused_blocks, memo.num_hashed_blocks) == (0, 2)
    assert memo.hashes("t", "s", second, salt) == chain_hashes(second, 4, salt)
    assert (memo.num_reused_blocks, memo.num_hashed_blocks) == (2, 3)
    memo.hashes("t", None, second, salt)   # no session: hashed whole, remembered nowhere
    assert (memo.num_reused_blocks, memo.num_hashed_blocks, len(memo)) == (2, 6, 1)


def test_the_same_session_name_under_another_tenant_or_salt_is_never_reused():
    memo, ids = SessionHashes(4), list(range(12))
    memo.hashes("a", "s", ids, tenant_salt("a"))
    assert memo.hashes("b", "s", ids, tenant_salt("b")) == chain_hashes(ids, 4, tenant_salt("b"))
    grouped = tenant_salt("a", "shared")   # the tenant moved into a prefix group
    assert memo.hashes("a", "s", ids, grouped) == chain_hashes(ids, 4, grouped)
    assert memo.num_reused_blocks == 0


def test_random_sessions_always_equal_chain_hashes_and_stay_within_the_bound():
    rng, memo = random.Random(11), SessionHashes(8, max_tokens=3000)
    prompts: dict[tuple[str, str], list[int]] = {}
    for _ in range(2000):
        key = (rng.choice("tu"), f"s{rng.randrange(12)}")
        last = prompts.get(key, [])
        roll = rng.random()
        if roll < 0.6:     # the next agent step: the last prompt and more
            ids = last + [rng.randrange(50_000) for _ in range(rng.randrange(0, 90))]
        elif roll < 0.8:   # compacted: cut somewhere, then new text
            ids = last[:rng.randrange(len(last) + 1)] + [rng.randrange(50_000) for _ in range(rng.randrange(0, 40))]
        else:              # one id edited anywhere
            ids = list(last)
            if ids:
                ids[rng.randrange(len(ids))] = rng.randrange(50_000)
        prompts[key] = ids
        salt = tenant_salt(key[0])
        assert memo.hashes(*key, tuple(ids) if roll > 0.9 else ids, salt) == chain_hashes(ids, 8, salt)
        assert memo.num_tokens <= 3000
    assert memo.num_reused_blocks > memo.num_hashed_blocks / 4   # the reuse happened


def test_a_prompt_longer_than_the_bound_is_hashed_but_not_kept():
    memo = SessionHashes(4, max_tokens=10)
    ids = list(range(20))
    assert memo.hashes("t", "s", ids, b"") == chain_hashes(ids, 4, b"")
    assert len(memo) == 0 and memo.num_tokens == 0
    with pytest.raises(ValueError):
        SessionHashes(0)
