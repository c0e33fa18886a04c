"""The block hashes of each agent session's last prompt, so its next step hashes only
what is new.

An agent's next step re-sends its previous prompt (the conversation so far) plus the
tool results and the next turn; hashing all of it again is the larger part of what the
engine does on the gateway's event loop for a long context (`chain_hashes`: several ms
at 32k tokens here). `SessionHashes.hashes` encodes the prompt's ids (as the hashes
encode them), finds how many leading full blocks it shares with the session's last one
(byte comparisons), reuses those blocks' hashes and chains only the rest.

Invariants: `hashes(tenant, session, ids, salt)` always equals `chain_hashes(ids,
block_size, salt)`: an entry is used only under the same tenant, session and salt, and
only for leading blocks whose encoded ids are equal; the entries hold at most
`max_tokens` ids in all (8 bytes each), the least recently used session leaving first. Thread-safe (one lock around the
table; comparing and hashing run outside it).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cache.hashing import BlockHash, chain_encoded, encode_full_blocks

MAX_TOKENS = 2_000_000   # ids kept in all: 16 MB of encoded ids, plus the hashes
ID_BYTES = 8   # per id, as cache.hashing encodes them


@dataclass(frozen=True, slots=True)
class _Entry:
    salt: bytes
    encoded: bytes   # the last prompt's full blocks, as `encode_full_blocks` gives them
    hashes: tuple[BlockHash, ...]   # a tuple: the caller may change the list it was given


def num_equal_blocks(a: bytes, b: bytes, block_bytes: int) -> int:
    """How many leading blocks of `block_bytes` bytes `a` and `b` have in common."""
    num_blocks = min(len(a), len(b)) // block_bytes
    end = num_blocks * block_bytes
    if a[:end] == b[:end]:
        return num_blocks
    equal, differ = 0, num_blocks   # the first `equal` blocks are equal; the first `differ` are not
    while differ - equal > 1:
        middle = (equal + differ) // 2
        start, stop = equal * block_bytes, middle * block_bytes
        if a[start:stop] == b[start:stop]:
            equal = middle
        else:
            differ = middle
    return equal


class SessionHashes:
    """Each (tenant, session)'s last prompt and its hashes (the module docstring says what
    holds); `num_hashed_blocks` / `num_reused_blocks` count the blocks of all prompts."""

    def __init__(self, block_size: int, max_tokens: int = MAX_TOKENS) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.max_tokens = max_tokens
        self.num_reused_blocks = 0
        self.num_hashed_blocks = 0
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._num_tokens = 0
        self._lock = threading.Lock()

    def hashes(self, tenant: str, session: str | None, token_ids: Sequence[int], salt: bytes) -> list[BlockHash]:
        """The chained hashes of the full blocks of `token_ids`; remembered for `session`."""
        encoded = encode_full_blocks(token_ids, self.block_size)
        block_bytes = ID_BYTES * self.block_size
        with self._lock:
            last = self._entries.get((tenant, session)) if session is not None else None
        reused = num_equal_blocks(last.encoded, encoded, block_bytes) if last is not None and last.salt == salt else 0
        parent = last.hashes[reused - 1] if reused else None
        hashes = list(last.hashes[:reused]) if reused else []
        hashes += chain_encoded(encoded[reused * block_bytes:], self.block_size, salt, parent)
        with self._lock:
            self.num_reused_blocks += reused
            self.num_hashed_blocks += len(hashes) - reused
            if session is not None:
                self._remember((tenant, session), _Entry(salt, encoded, tuple(hashes)))
        return hashes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def _remember(self, key: tuple[str, str], entry: _Entry) -> None:
        """Caller holds the lock."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._num_tokens -= len(old.encoded) // ID_BYTES
        num_tokens = len(entry.encoded) // ID_BYTES
        if num_tokens > self.max_tokens:
            return
        self._entries[key] = entry
        self._num_tokens += num_tokens
        while self._num_tokens > self.max_tokens:
            _, evicted = self._entries.popitem(last=False)
            self._num_tokens -= len(evicted.encoded) // ID_BYTES
