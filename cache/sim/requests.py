"""Trace records as the simulator replays them: tenant-scoped block hashes, full blocks only.

The simulator drives the real `BlockManager`, which keys blocks by `BlockHash`. A trace
names blocks by `hash_ids` scoped by tenant (TRACE_FORMAT.md), so each distinct
(tenant, hash id) pair is interned to one small `BlockHash`; equal pairs get equal
hashes and no two pairs share one.

Invariants: `SimRequest.hashes` covers the request's FULL blocks only
(`num_prompt_tokens // block_size` of them): like vLLM, the server never caches a
partial tail block, so neither does the simulator. `num_blocks` still counts every
block of the prompt (the partial tail too), since hit rates are over all blocks.
A record without `hash_ids` gets blocks derived from (tenant, session, index), so the
steps of one session extend each other; without a session its blocks are unique.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cache.hashing import BlockHash
from cache.trace_format import TraceRecord


@dataclass(slots=True)
class SimRequest:
    """One request of a replay, in arrival order."""

    t_s: float
    tenant: str
    session: str | None
    after: str | None
    tool_calls: tuple[str, ...]
    num_prompt_tokens: int
    num_output_tokens: int
    num_blocks: int
    hashes: list[BlockHash]
    flex: bool = False   # `service_tier: "flex"`: its blocks go first (cache.background_blocks)


class BlockInterner:
    """Maps (tenant, trace block id) to a `BlockHash`, densely from 0."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[tuple[str, object], BlockHash] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def hash_of(self, tenant: str, block_id: object) -> BlockHash:
        key = (tenant, block_id)
        found = self._ids.get(key)
        if found is None:
            found = BlockHash(len(self._ids))
            self._ids[key] = found
        return found


def to_sim_requests(records: Sequence[TraceRecord], block_size: int) -> list[SimRequest]:
    """The records as `SimRequest`s (same order), with interned tenant-scoped hashes."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    interner = BlockInterner()
    requests: list[SimRequest] = []
    for index, record in enumerate(records):
        num_blocks = math.ceil(record.input_tokens / block_size)
        num_full = record.input_tokens // block_size
        tenant = record.tenant
        if record.hash_ids is not None:
            block_ids: Sequence[object] = record.hash_ids[:num_full]
        elif record.session is not None:
            block_ids = [(record.session, i) for i in range(num_full)]
        else:
            block_ids = [("request", index, i) for i in range(num_full)]
        hash_of = interner.hash_of
        requests.append(SimRequest(
            t_s=record.t,
            tenant=tenant,
            session=record.session,
            after=record.after,
            tool_calls=tuple(record.tool_calls),
            num_prompt_tokens=record.input_tokens,
            num_output_tokens=record.output_tokens,
            num_blocks=num_blocks,
            hashes=[hash_of(tenant, block_id) for block_id in block_ids],
            flex=record.service_tier == "flex",
        ))
    return requests
