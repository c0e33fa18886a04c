"""What a request costs in the simulator: prefill of the uncached tokens, host copies.

    sim_ttft_s = request_overhead_s
               + prefill_s_per_token * (prompt tokens not served from cache)
               + host_to_hot_s_per_block * (blocks served from HOST, copied back first)

Calibrations (SmolLM2-135M on this project's 2-core Xeon), one per engine dtype; the
default is bfloat16, what the engine's dtype "auto" loads on this CPU:

- bfloat16: `python benchmarks/calibrate_sim.py --model smollm2 --dtype bfloat16`
  (2026-11-30): cold prefills of 256, 512, 1,024 and 2,048 tokens through the engine's
  request path took 0.202, 0.325, 0.624 and 1.191 s (medians of 5); the least-squares
  line is 0.556 ms per token plus 0.052 s per request (largest error 4 %). 23,040 KV
  bytes per token (30 layers x 3 KV heads x 64 dims x K and V x 2 bytes).
- float32: the first calibration (cold prefills of 320, 1,088 and 2,112 tokens took
  0.43, 1.35 and 3.46 s, and a 64-token suffix over a cached 2,048-token prefix 0.26 s;
  a line through the origin gave 1.553 ms per token, and the 0.06 s of the cached run
  that was not the forward pass the per-request overhead), kept as it was so that every
  earlier simulator figure reproduces with `--calibration float32`. Re-measured with
  calibrate_sim on 2026-11-30: 1.756 ms per token and no overhead (the fitted intercept
  was negative). 46,080 KV bytes per token.

`benchmarks/calibrate_sim.py` measures another machine or model and prints the flags.
Costs scale per token, so a 512-token block (Mooncake) costs 32x a 16-token one.

A HOST->HOT copy is a memcpy of one block's KV: a large numpy copy on this machine runs
at about 10 GB/s (median of 50 copies of 23.6 MB), so a block costs
block_size * kv_bytes_per_token / 1e10 s: in bfloat16 37 us for 16 tokens, 1.2 ms for 512.

A request's decode (`decode_s_per_token` per output token) is charged to no TTFT; it
only sets how long a request holds its blocks in a replay with `--hold` (replay.py):
from its arrival to arrival + TTFT + output tokens x decode_s_per_token. Default: a
SmolLM2 decode step of one request with 1,024 cached tokens, 0.0592 s in bfloat16
(float32: 0.0589 s, so one default serves both calibrations; `python
benchmarks/bench_dtype.py --model smollm2 --repeats 5`, docs/benchmarks.md). That is one
request decoding alone: with several decoding together a pass takes longer (0.131 s for
8 rows), so the default is the shortest a request holds its blocks.

NOTE: the model has no queueing: it ranks cache policies by the prefill work they save,
which is what a policy changes. Every constant is a CLI flag.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EngineCalibration:
    """What one engine setup costs: seconds per uncached prompt token, seconds per
    request whatever its length, and KV bytes per token (sets the HOST->HOT copy)."""

    prefill_s_per_token: float
    request_overhead_s: float
    kv_bytes_per_token: int


CALIBRATIONS = MappingProxyType({
    "bfloat16": EngineCalibration(prefill_s_per_token=0.556e-3, request_overhead_s=0.052,
                                  kv_bytes_per_token=23_040),
    "float32": EngineCalibration(prefill_s_per_token=1.553e-3, request_overhead_s=0.06,
                                 kv_bytes_per_token=46_080),
})
DEFAULT_CALIBRATION = "bfloat16"  # the engine's dtype "auto" on this machine
PREFILL_S_PER_TOKEN = CALIBRATIONS[DEFAULT_CALIBRATION].prefill_s_per_token
REQUEST_OVERHEAD_S = CALIBRATIONS[DEFAULT_CALIBRATION].request_overhead_s
KV_BYTES_PER_TOKEN = CALIBRATIONS[DEFAULT_CALIBRATION].kv_bytes_per_token
DECODE_S_PER_TOKEN = 0.0592   # both dtypes (float32: 0.0589); see the module docstring
COPY_BYTES_PER_S = 1.0e10


@dataclass(frozen=True, slots=True)
class CostModel:
    """Seconds charged per request; all constants non-negative."""

    prefill_s_per_token: float = PREFILL_S_PER_TOKEN
    request_overhead_s: float = REQUEST_OVERHEAD_S
    host_to_hot_s_per_block: float = 16 * KV_BYTES_PER_TOKEN / COPY_BYTES_PER_S
    decode_s_per_token: float = DECODE_S_PER_TOKEN   # only for how long a request holds its blocks

    def __post_init__(self) -> None:
        if min(self.prefill_s_per_token, self.request_overhead_s, self.host_to_hot_s_per_block,
               self.decode_s_per_token) < 0:
            raise ValueError("cost constants must be non-negative")

    @staticmethod
    def for_block_size(
        block_size: int,
        *,
        calibration: str = DEFAULT_CALIBRATION,
        prefill_s_per_token: float | None = None,
        request_overhead_s: float | None = None,
        kv_bytes_per_token: int | None = None,
        copy_bytes_per_s: float = COPY_BYTES_PER_S,
        host_to_hot_s_per_block: float | None = None,
        decode_s_per_token: float | None = None,
    ) -> "CostModel":
        """The named calibration, any constant given overriding it, with the copy cost
        derived for `block_size` tokens. An unknown calibration is a ValueError."""
        if calibration not in CALIBRATIONS:
            raise ValueError(f"unknown calibration {calibration!r}: use one of {', '.join(CALIBRATIONS)}")
        base = CALIBRATIONS[calibration]
        if host_to_hot_s_per_block is None:
            kv_bytes = base.kv_bytes_per_token if kv_bytes_per_token is None else kv_bytes_per_token
            host_to_hot_s_per_block = block_size * kv_bytes / copy_bytes_per_s
        return CostModel(base.prefill_s_per_token if prefill_s_per_token is None else prefill_s_per_token,
                         base.request_overhead_s if request_overhead_s is None else request_overhead_s,
                         host_to_hot_s_per_block,
                         DECODE_S_PER_TOKEN if decode_s_per_token is None else decode_s_per_token)

    def ttft_s(self, num_uncached_tokens: int, num_host_blocks: int) -> float:
        return (self.request_overhead_s + self.prefill_s_per_token * num_uncached_tokens
                + self.host_to_hot_s_per_block * num_host_blocks)

    def end_s(self, arrival_s: float, ttft_s: float, num_output_tokens: int) -> float:
        """When a request that arrived at `arrival_s` ends: its first token, then the rest
        of its output at `decode_s_per_token` each."""
        return arrival_s + ttft_s + self.decode_s_per_token * num_output_tokens

    def block_prefill_s(self, block_size: int) -> float:
        """Prefill seconds one cached block of `block_size` tokens saves."""
        return self.prefill_s_per_token * block_size
