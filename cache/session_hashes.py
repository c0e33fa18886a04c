"""The block hashes of each agent session's last prompt, so its next step hashes only
what is new.

An agent's next step re-sends its previous prompt (the conversation so far) plus the
tool results and the next turn; hashing all of it again is the larger part of what the
engine does on the gateway's event loop for a long context (`chain_hashes`: several ms
at 32k tokens here). `SessionHashes.hashes` finds how many leading full blocks the prompt
shares with the session's last one (list comparisons, which the prompt token cache's
spliced ids make mostly identity checks), reuses those blocks' hashes, and encodes and
chains only the rest.

Invariants: `hashes(tenant, session, ids, salt)` always equals `chain_hashes(ids,
block_size, salt)`: an entry is used only under the same tenant, session and salt, and
only for leading blocks whose ids are equal; the entries hold at most `max_tokens` ids
in all, the least recently used session leaving first. Thread-safe (one lock around the
table; comparing and hashing run outside it).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cache.hashing import BlockHash, chain_encoded, encode_full_blocks

MAX_TOKENS = 1_000_000   # ids kept in all: 8 MB of references (the ints are mostly shared)


@dataclass(frozen=True, slots=True)
class _Entry:
    salt: bytes
    token_ids: list[int]   # the last prompt's full blocks (a copy)
    hashes: list[BlockHash]


def num_equal_blocks(a: list[int], b: list[int], block_size: int) -> int:
    """How many leading full blocks of `block_size` ids `a` and `b` have in common."""
    num_blocks = min(len(a), len(b)) // block_size
    end = num_blocks * block_size
    if a[:end] == b[:end]:
        return num_blocks
    equal, differ = 0, num_blocks   # the first `equal` blocks are equal; the first `differ` are not
    while differ - equal > 1:
        middle = (equal + differ) // 2
        start, stop = equal * block_size, middle * block_size
        if a[start:stop] == b[start:stop]:
            equal = middle
        else:
            differ = middle
    return equal


class SessionHashes:
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
        size = self.block_size
        ids = token_ids if isinstance(token_ids, list) else list(token_ids)
        end = len(ids) // size * size
        with self._lock:
            last = self._entries.get((tenant, session)) if session is not None else None
        reused = num_equal_blocks(last.token_ids, ids, size) if last is not None and last.salt == salt else 0
        parent = last.hashes[reused - 1] if reused else None
        hashes = (last.hashes[:reused] if reused else []) + chain_encoded(
            encode_full_blocks(ids[reused * size:end], size), size, salt, parent)
        with self._lock:
            self.num_reused_blocks += reused
            self.num_hashed_blocks += len(hashes) - reused
            if session is not None:
                self._remember((tenant, session), _Entry(salt, ids[:end], hashes))
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
            self._num_tokens -= len(old.token_ids)
        if len(entry.token_ids) > self.max_tokens:
            return
        self._entries[key] = entry
        self._num_tokens += len(entry.token_ids)
        while self._num_tokens > self.max_tokens:
            _, evicted = self._entries.popitem(last=False)
            self._num_tokens -= len(evicted.token_ids)
