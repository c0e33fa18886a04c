"""Preallocated KV tensor storage for one cache tier, indexed by block id.

The only torch-importing module of `cache/`: the block manager decides *which* block id
holds what; this arena holds the bytes. One tensor per tier, shaped
`[layers, 2 (k/v), kv_heads, num_blocks, block_size, head_dim]`, so gathering a run of
blocks for every layer is ONE `index_select` along the block axis whose result already
has the `[heads, tokens, dim]` layout the model's cache wants (no per-block tensors, no
second copy).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from cache.tiers import Tier


@dataclass(frozen=True, slots=True)
class KVLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: torch.dtype = torch.float32

    @property
    def bytes_per_block(self) -> int:
        element = torch.tensor([], dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.block_size * self.head_dim * element

    @classmethod
    def for_model_config(cls, config, block_size: int, dtype: torch.dtype) -> "KVLayout":
        heads = config.num_key_value_heads or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.num_hidden_layers, heads, head_dim, block_size, dtype)


class KVArena:
    """KV bytes of `num_blocks` blocks of one tier. Block ids are 0..num_blocks-1.

    Invariant: a token's slot is read only after it was written (`gather` cuts a run at
    the tokens it holds; blocks are copied between tiers and workers once filled), so
    the storage starts uninitialised on the CPU: zeroing SmolLM2's default 4,096 blocks
    (1.4 GiB) touched every page and took 4 s of each worker's start; untouched pages
    are mapped as blocks are first written. A GPU tier is zeroed (one cheap kernel)."""

    def __init__(self, layout: KVLayout, num_blocks: int, device: str = "cpu", pin_memory: bool = False):
        self.layout = layout
        self.num_blocks = num_blocks
        shape = (layout.num_layers, 2, layout.num_kv_heads, max(num_blocks, 1),
                 layout.block_size, layout.head_dim)
        allocate = torch.empty if torch.device(device).type == "cpu" else torch.zeros
        self.data = allocate(shape, dtype=layout.dtype, device=device,
                             pin_memory=pin_memory and torch.cuda.is_available())

    def write(self, block_ids: list[int], layer_kvs: list[tuple[torch.Tensor, torch.Tensor]],
              first_token: int) -> None:
        """Copy tokens `first_token + i*block_size ...` of the `[1, H, T, D]` per-layer
        tensors (on any device) into block `block_ids[i]`, for every i."""
        if not block_ids:
            return
        bs = self.layout.block_size
        n = len(block_ids)
        index = torch.tensor(block_ids, dtype=torch.long, device=self.data.device)
        end = first_token + n * bs
        for layer, (k, v) in enumerate(layer_kvs):
            # [1, H, n*bs, D] -> [H, n, bs, D]
            ks = k[0, :, first_token:end].reshape(k.shape[1], n, bs, k.shape[-1])
            vs = v[0, :, first_token:end].reshape(v.shape[1], n, bs, v.shape[-1])
            # NOTE: `.to` the arena's device too: a host arena is written from a GPU cache (a blocking
            # copy, so the stream's queued tier copies, which may read or write these slots, are done)
            self.data[layer, 0].index_copy_(1, index, ks.to(self.data.device, self.data.dtype))
            self.data[layer, 1].index_copy_(1, index, vs.to(self.data.device, self.data.dtype))

    def write_positions(self, placed: list[tuple[int, int]], layer_kvs: list[tuple[torch.Tensor, torch.Tensor]]
                        ) -> None:
        """`write` each `(chain position, block id)` of `placed` (positions ascending) from
        its block of the per-layer tensors: one copy per run of consecutive positions."""
        run_start = 0
        for i in range(1, len(placed) + 1):
            if i == len(placed) or placed[i][0] != placed[i - 1][0] + 1:
                run = placed[run_start:i]
                self.write([block_id for _, block_id in run], layer_kvs, run[0][0] * self.layout.block_size)
                run_start = i

    def gather(self, block_ids: list[int], num_tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer `(k, v)` of shape `[1, H, num_tokens, D]` for the run `block_ids`
        (`num_tokens` <= len(block_ids) * block_size; a prefix ending mid-block is cut).

        NOTE: when the ids are consecutive (the common case: a request's blocks are
        allocated together) the result is a read-only *view* of the arena, no copy; the
        model's cache appends by concatenation, so the arena is never written through it.
        """
        first, n = block_ids[0], len(block_ids)
        if block_ids[-1] - first == n - 1 and block_ids == list(range(first, first + n)):
            picked = self.data[:, :, :, first:first + n]
        else:
            index = torch.tensor(block_ids, dtype=torch.long, device=self.data.device)
            picked = self.data.index_select(3, index)  # [L, 2, H, n, bs, D], one copy
        L, _, H, _, bs, D = picked.shape
        flat = picked.reshape(L, 2, H, n * bs, D)[:, :, :, :num_tokens]
        return [(flat[layer, 0].unsqueeze(0), flat[layer, 1].unsqueeze(0)) for layer in range(L)]

    def read(self, block_ids: list[int], num_tokens: int,
             device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`gather`, copied onto `device`: never a view of the arena, so the caller may let
        these slots be rewritten as soon as it returns (a request reading HOST blocks
        straight into its own cache, then dropping their references). A CPU arena read
        for a GPU first waits for the GPU's queued copies (tier moves may be writing
        these slots)."""
        device = torch.device(device)
        if device.type == "cuda" and self.data.device.type == "cpu":
            torch.cuda.synchronize(device)
        return [(k.to(device, copy=True), v.to(device, copy=True)) for k, v in self.gather(block_ids, num_tokens)]

    def copy_block_to(self, src_id: int, dst: "KVArena", dst_id: int) -> None:
        dst.data[:, :, :, dst_id].copy_(self.data[:, :, :, src_id], non_blocking=True)


class ArenaMover:
    """The block manager's `BlockMover` over a hot and a host arena: tier moves are
    real tensor copies."""

    def __init__(self, hot: KVArena, host: KVArena | None):
        self._arenas = {Tier.HOT: hot, Tier.HOST: host}

    def copy_block(self, src_tier: Tier, src_id: int, dst_tier: Tier, dst_id: int) -> None:
        src, dst = self._arenas[src_tier], self._arenas[dst_tier]
        if src is None or dst is None:
            raise ValueError(f"no arena for a {src_tier} -> {dst_tier} copy")
        src.copy_block_to(src_id, dst, dst_id)
