"""Copying a cached prefix's KV blocks between local worker processes.

The exporting worker copies the HOT leading run of a prompt's cached blocks into a new
POSIX shared-memory segment (`multiprocessing.shared_memory`), laid out like its arena,
`[layers, 2, kv_heads, num_blocks, block_size, head_dim]`; the importing worker
registers the same blocks in its own block manager (`commit`, which verifies lineage and
token ids as for any prefix) and copies the bytes of the new ones into its arena, then
unlinks the segment. Hashes depend only on tenant and tokens, so both workers name the
blocks alike.

Workers that share no memory (Ray actors, possibly on other machines) use the inline
variant: `export_prefix_bytes` returns the same layout as bytes, which travel inside the
worker's answer and the engine's ImportPrefix, and `import_prefix_bytes` registers them.

A copy skips the leading blocks the importer already holds (`first_block`, from the
router's index): only the blocks from there on are exported and shipped, and the importer
hangs them on its own cached run. Should that run be shorter at import time (evicted
since), nothing is imported and the request prefills.

Invariants: the exporter holds no reference after `export_prefix` returns (nothing can
evict a block in between: one loop drives the runner); the importer releases every
reference it took and unlinks the segment on every path, so a transfer leaks neither
blocks nor shared memory; a block the importer registered is left matchable only once its
KV was written: on any failure after the commit the new blocks are forgotten (the
failure is raised on). Both workers must serve the same model (same KV layout).

`measure_costs` times a prefill and a round trip through shared memory (or bytes) at
worker start, so the router compares measured costs, not guesses. Inline, the time the
bytes spend between machines is not in the probe.
"""
from __future__ import annotations

import statistics
import time
from multiprocessing import shared_memory

import torch

from cache.tiers import Tier
from shards.protocol import CostProfile

PROBE_PREFILL_TOKENS = 512
PROBE_BLOCKS = 8
PROBE_REPEATS = 3


def _view(buffer, runner, num_blocks: int) -> torch.Tensor:
    layout = runner.layout
    shape = (layout.num_layers, 2, layout.num_kv_heads, num_blocks, layout.block_size, layout.head_dim)
    count = 1
    for dim in shape:
        count *= dim
    return torch.frombuffer(buffer, dtype=layout.dtype, count=count).view(shape)


def _new_segment(runner, num_blocks: int) -> shared_memory.SharedMemory:
    return shared_memory.SharedMemory(create=True, size=max(1, num_blocks * runner.layout.bytes_per_block))


def _hot_leading_blocks(runner, tenant: str, token_ids: list[int], max_blocks: int, first_block: int) -> list[int]:
    hashes, blocks = runner.blocks.hash_prompt(tenant, token_ids)
    return runner.blocks.match(tenant, hashes[:max_blocks], blocks[:max_blocks]).hot_block_ids[first_block:]


def export_prefix(runner, tenant: str, token_ids: list[int], max_blocks: int,
                  first_block: int = 0) -> tuple[str | None, int]:
    """Copy the HOT cached leading blocks of `token_ids` from `first_block` (those before
    it the importer holds) up to `max_blocks` into a new segment; (segment name, number of
    blocks copied), or (None, 0) when none is cached."""
    block_ids = _hot_leading_blocks(runner, tenant, token_ids, max_blocks, first_block)
    if not block_ids:
        return None, 0
    segment = _new_segment(runner, len(block_ids))
    try:
        view = _view(segment.buf, runner, len(block_ids))
        _copy_out(runner, block_ids, view)
        del view
        return segment.name, len(block_ids)
    finally:
        segment.close()


def export_prefix_bytes(runner, tenant: str, token_ids: list[int], max_blocks: int,
                        first_block: int = 0) -> tuple[bytes | None, int]:
    """`export_prefix` for workers that share no memory (other machines): the blocks as
    bytes in the arena's layout, to travel inside the answer; (None, 0) when none is cached."""
    block_ids = _hot_leading_blocks(runner, tenant, token_ids, max_blocks, first_block)
    if not block_ids:
        return None, 0
    buffer = bytearray(len(block_ids) * runner.layout.bytes_per_block)
    view = _view(buffer, runner, len(block_ids))
    _copy_out(runner, block_ids, view)
    del view
    return bytes(buffer), len(block_ids)


def import_prefix(runner, tenant: str, session: str | None, token_ids: list[int],
                  shm_name: str, num_blocks: int, first_block: int = 0) -> int:
    """Register the segment's blocks as the cached blocks `first_block` on of `token_ids`
    and copy the new ones into the arena; unlinks the segment. Returns the number of
    blocks now cached from the segment (fewer when the cache had no room, 0 when this
    worker no longer holds the `first_block` blocks before them)."""
    try:
        segment = shared_memory.SharedMemory(name=shm_name)
    except FileNotFoundError:
        return 0
    try:
        view = _view(segment.buf, runner, num_blocks)
        try:
            return _import_view(runner, tenant, session, token_ids, view, num_blocks, first_block)
        finally:
            del view
    finally:
        segment.close()
        segment.unlink()


def import_prefix_bytes(runner, tenant: str, session: str | None, token_ids: list[int],
                        payload: bytes, num_blocks: int, first_block: int = 0) -> int:
    """`import_prefix` from the bytes `export_prefix_bytes` made (ValueError when their
    size does not match `num_blocks` blocks of this worker's layout)."""
    if len(payload) != num_blocks * runner.layout.bytes_per_block:
        raise ValueError(f"a payload of {len(payload)} bytes cannot hold {num_blocks} blocks of "
                         f"{runner.layout.bytes_per_block} bytes")
    return _import_view(runner, tenant, session, token_ids, _view(bytearray(payload), runner, num_blocks),
                        num_blocks, first_block)


def _import_view(runner, tenant: str, session: str | None, token_ids: list[int], view: torch.Tensor,
                 num_blocks: int, first_block: int = 0) -> int:
    """Register up to `num_blocks` blocks of `view` (laid out as `num_blocks` blocks) as
    the cached blocks `first_block` on of `token_ids`, after this worker's own cached run
    of the blocks before them, copy the new ones into the arena, drop every reference
    taken; the number of blocks now cached from `view`. When that run is shorter (evicted
    since the router looked) nothing is registered: there is no KV for the gap. The new
    blocks are forgotten unless their KV was written (module docstring)."""
    hashes, blocks = runner.blocks.hash_prompt(tenant, token_ids)
    end = min(first_block + num_blocks, len(hashes))
    if end <= first_block or runner.blocks.match(tenant, hashes[:first_block],
                                                 blocks[:first_block]).num_blocks < first_block:
        return 0
    placed = runner.blocks.commit(tenant, session, hashes[:end], blocks[:end], 0)
    new = [(position, hot_id) for position, (hot_id, is_new) in enumerate(placed) if is_new]
    written = False
    try:
        if new and new[0][0] < first_block:
            return 0   # a block of the run was lost while the commit made room: no KV for it here
        if new:
            src = torch.tensor([position - first_block for position, _ in new], dtype=torch.long)
            dst = torch.tensor([hot_id for _, hot_id in new], dtype=torch.long,
                               device=runner.hot.data.device)
            runner.hot.data.index_copy_(3, dst, view.index_select(3, src).to(dst.device))
        written = True
    finally:
        runner.blocks.release([hot_id for hot_id, _ in placed])
        if not written:
            _forget_new(runner, [hot_id for _, hot_id in new])
    return max(0, len(placed) - first_block)


def _forget_new(runner, block_ids: list[int]) -> None:
    """Forget the blocks an import registered but wrote no KV into (tail first: each is a
    leaf once the ones after it are gone). A private one was freed at its release. Should
    one not be dropped, the whole cache is cleared: a block is never left matchable over
    KV that was never written."""
    try:
        for block_id in reversed(block_ids):
            block = runner.blocks.block(Tier.HOT, block_id)
            if block is not None and block.is_cached:
                runner.blocks.drop(block_id, Tier.HOT)
    except Exception:
        runner.blocks.clear()
        raise


def measure_costs(runner, chunk_tokens: int = PROBE_PREFILL_TOKENS,
                  repeats: int = PROBE_REPEATS, inline: bool = False) -> CostProfile:
    """Time a prefill of PROBE_PREFILL_TOKENS tokens in chunks of `chunk_tokens`, as
    the worker loop runs it (the median of `repeats`, after a warm-up) and an
    export/import copy of PROBE_BLOCKS blocks through shared memory, or through bytes
    when `inline` (the best of `repeats`). The cache is left untouched. The engine
    refines both from live requests."""
    vocab = max(2, min(int(runner.model.config.vocab_size), 256))
    tokens = [(i * 7919) % vocab for i in range(PROBE_PREFILL_TOKENS)]

    def prefill_once() -> None:
        cache = None
        for start in range(0, len(tokens), chunk_tokens):
            _, cache = runner.forward(tokens[start:start + chunk_tokens], cache, start)
        runner.synchronize()

    runner.forward(tokens[:16], None, 0)
    prefill_s = statistics.median(_timed(prefill_once) for _ in range(repeats))
    num_blocks = min(PROBE_BLOCKS, runner.hot.num_blocks)
    index = torch.arange(num_blocks, dtype=torch.long, device=runner.hot.data.device)

    size = num_blocks * runner.layout.bytes_per_block
    payload = bytes(size)

    def export_once() -> None:
        segment = None if inline else _new_segment(runner, num_blocks)
        buffer = bytearray(size) if inline else segment.buf
        view = _view(buffer, runner, num_blocks)
        _copy_out(runner, list(range(num_blocks)), view)
        del view
        if segment is None:
            bytes(buffer)  # the copy the answer carries
        else:
            segment.close()
            segment.unlink()

    def import_once() -> None:
        segment = None if inline else _new_segment(runner, num_blocks)
        view = _view(bytearray(payload) if inline else segment.buf, runner, num_blocks)
        scratch = runner.hot.data.index_select(3, index)  # NOTE: no write into live slots
        scratch.copy_(view)
        runner.synchronize()
        del view
        if segment is not None:
            segment.close()
            segment.unlink()

    export_s = min(_timed(export_once) for _ in range(repeats))
    import_s = min(_timed(import_once) for _ in range(repeats))
    return CostProfile(prefill_s_per_token=prefill_s / PROBE_PREFILL_TOKENS,
                       export_s_per_block=export_s / num_blocks,
                       import_s_per_block=import_s / num_blocks)


def _copy_out(runner, block_ids: list[int], view: torch.Tensor) -> None:
    """Copy hot blocks `block_ids` into the CPU `view` (slot i <- block_ids[i])."""
    data = runner.hot.data
    index = torch.tensor(block_ids, dtype=torch.long, device=data.device)
    if data.device.type == "cpu":
        torch.index_select(data, 3, index, out=view)
    else:
        view.copy_(data.index_select(3, index))  # one gather on the GPU, one copy down


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
