"""What a request costs in the simulator: prefill of the uncached tokens, host copies.

    sim_ttft_s = request_overhead_s
               + prefill_s_per_token * (prompt tokens not served from cache)
               + host_to_hot_s_per_block * (blocks served from HOST, copied back first)

Calibration (SmolLM2-135M, fp32, 2 CPU cores, measured on the engine): cold prefills of
320, 1,088 and 2,112 tokens took 0.43, 1.35 and 3.46 s, and a 64-token suffix over a
cached 2,048-token prefix 0.26 s, of which about 0.2 s is the suffix forward itself.
A least-squares line through the origin over those four points gives 1.553 ms per token
(predicting 0.50, 1.69, 3.28 and 0.10 s); the 0.06 s of the cached run that is not the
forward pass is the fixed per-request overhead. Costs scale per token, so a 512-token
block (Mooncake) costs 32x a 16-token one.

A HOST->HOT copy is a memcpy of one block's KV: SmolLM2 holds 46,080 bytes of KV per
token (30 layers x 3 KV heads x 64 dims x K and V x 4 bytes), and a large numpy copy on
this machine runs at about 10 GB/s (median of 50 copies of 23.6 MB), so a block costs
block_size * 46,080 / 1e10 s: 74 us for 16 tokens, 2.4 ms for 512.

NOTE: the model has no queueing and no decode: it ranks cache policies by the prefill
work they save, which is what a policy changes. Every constant is a CLI flag.
"""
from __future__ import annotations

from dataclasses import dataclass

PREFILL_S_PER_TOKEN = 1.553e-3
REQUEST_OVERHEAD_S = 0.06
KV_BYTES_PER_TOKEN = 46_080
COPY_BYTES_PER_S = 1.0e10


@dataclass(frozen=True, slots=True)
class CostModel:
    """Seconds charged per request; all constants non-negative."""

    prefill_s_per_token: float = PREFILL_S_PER_TOKEN
    request_overhead_s: float = REQUEST_OVERHEAD_S
    host_to_hot_s_per_block: float = 16 * KV_BYTES_PER_TOKEN / COPY_BYTES_PER_S

    def __post_init__(self) -> None:
        if min(self.prefill_s_per_token, self.request_overhead_s, self.host_to_hot_s_per_block) < 0:
            raise ValueError("cost constants must be non-negative")

    @staticmethod
    def for_block_size(
        block_size: int,
        *,
        prefill_s_per_token: float = PREFILL_S_PER_TOKEN,
        request_overhead_s: float = REQUEST_OVERHEAD_S,
        kv_bytes_per_token: int = KV_BYTES_PER_TOKEN,
        copy_bytes_per_s: float = COPY_BYTES_PER_S,
        host_to_hot_s_per_block: float | None = None,
    ) -> "CostModel":
        """The calibrated model with the copy cost derived for `block_size` tokens."""
        if host_to_hot_s_per_block is None:
            host_to_hot_s_per_block = block_size * kv_bytes_per_token / copy_bytes_per_s
        return CostModel(prefill_s_per_token, request_overhead_s, host_to_hot_s_per_block)

    def ttft_s(self, num_uncached_tokens: int, num_host_blocks: int) -> float:
        return (self.request_overhead_s + self.prefill_s_per_token * num_uncached_tokens
                + self.host_to_hot_s_per_block * num_host_blocks)

    def block_prefill_s(self, block_size: int) -> float:
        """Prefill seconds one cached block of `block_size` tokens saves."""
        return self.prefill_s_per_token * block_size
