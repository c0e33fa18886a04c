"""Naming the sessions of requests that carry none (Mooncake), from prefix continuity.

An agent or chat session re-sends its whole conversation each step, so a step's prompt
starts with every full block of the previous step's prompt. A request therefore
*continues* session S when its prompt contains, at the same position, the *frontier* of
S: the last full block of S's latest prompt. A block seen under two different sessions
(a system prompt every conversation starts with) is *shared* and never names a session.
A request continuing nobody starts a new session.

Invariants: every frontier entry names the session whose latest prompt ends there; a
request gets exactly one session; memory is bounded by `max_tracked_blocks` (the
oldest-seen blocks are forgotten first, which can only make a continuation look new).
"""
from __future__ import annotations

from collections.abc import Sequence

from cache.hashing import BlockHash


class SessionInferrer:
    """Assigns inferred session names to requests, one request at a time, in order."""

    __slots__ = ("_owner", "_shared", "_frontier", "_frontier_of", "_max_tracked", "_num_sessions", "_prefix")

    def __init__(self, *, max_tracked_blocks: int = 1_000_000, prefix: str = "inferred") -> None:
        if max_tracked_blocks <= 0:
            raise ValueError("max_tracked_blocks must be positive")
        self._owner: dict[BlockHash, str] = {}
        self._shared: set[BlockHash] = set()
        self._frontier: dict[BlockHash, str] = {}
        self._frontier_of: dict[str, BlockHash] = {}
        self._max_tracked = max_tracked_blocks
        self._num_sessions = 0
        self._prefix = prefix

    @property
    def num_sessions(self) -> int:
        return self._num_sessions

    def session_of(self, tenant: str, hashes: Sequence[BlockHash]) -> str:
        """The session of a request whose full blocks are `hashes` (tenant-scoped)."""
        session: str | None = None
        frontier = self._frontier
        shared = self._shared
        for i in range(len(hashes) - 1, -1, -1):
            found = frontier.get(hashes[i])
            if found is not None and hashes[i] not in shared:
                session = found
                break
        if session is None:
            self._num_sessions += 1
            session = f"{self._prefix}:{tenant}:{self._num_sessions}"
        self._remember(session, hashes)
        return session

    def _remember(self, session: str, hashes: Sequence[BlockHash]) -> None:
        owner = self._owner
        for block_hash in hashes:
            seen = owner.get(block_hash)
            if seen is None:
                owner[block_hash] = session
            elif seen != session:
                self._shared.add(block_hash)
        old = self._frontier_of.pop(session, None)
        if old is not None and self._frontier.get(old) == session:
            del self._frontier[old]
        if hashes:
            self._frontier[hashes[-1]] = session
            self._frontier_of[session] = hashes[-1]
        while len(owner) > self._max_tracked:
            forgotten = next(iter(owner))
            del owner[forgotten]
            self._shared.discard(forgotten)
            frontier_session = self._frontier.pop(forgotten, None)
            if frontier_session is not None:
                self._frontier_of.pop(frontier_session, None)
