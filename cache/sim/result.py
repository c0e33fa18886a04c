"""What one simulated replay measured, and the JSON line the CLI prints."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


def quantile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


@dataclass(slots=True)
class SimTotals:
    """Counters over the measured requests.

    Invariants: `num_hot_hit_blocks + num_host_hit_blocks <= num_blocks`; hit blocks are
    the leading cached run of each request; `num_hit_tokens <= num_prompt_tokens`;
    `ttfts_s` has one entry per measured request.
    """

    num_requests: int = 0
    num_blocks: int = 0
    num_hot_hit_blocks: int = 0
    num_host_hit_blocks: int = 0
    num_prompt_tokens: int = 0
    num_hit_tokens: int = 0
    ttfts_s: list[float] = field(default_factory=list)

    def count(self, num_blocks: int, num_hot_hits: int, num_host_hits: int, num_prompt_tokens: int,
              num_hit_tokens: int, ttft_s: float) -> None:
        """Add one measured request."""
        self.num_requests += 1
        self.num_blocks += num_blocks
        self.num_hot_hit_blocks += num_hot_hits
        self.num_host_hit_blocks += num_host_hits
        self.num_prompt_tokens += num_prompt_tokens
        self.num_hit_tokens += num_hit_tokens
        self.ttfts_s.append(ttft_s)

    def block_hit_rate(self) -> float:
        """Blocks served from either tier over all blocks."""
        return (self.num_hot_hit_blocks + self.num_host_hit_blocks) / max(self.num_blocks, 1)

    def ttft_mean_s(self) -> float | None:
        """The mean TTFT, summed in ascending order (the figure the CLI has always printed)."""
        return sum(sorted(self.ttfts_s)) / len(self.ttfts_s) if self.ttfts_s else None


def _rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(slots=True)
class SimResult:
    """A replay's figures. Like `totals`, the counts (evictions, flex evictions, blocks
    prefetched, prefetches used or wasted) cover the measured requests alone: what the
    warm-up did is left out (replay.py). `hold_decode_s_per_token` is set when requests
    held their blocks until they ended (`SimConfig.hold`); the JSON line then says so
    (`"hold": true` and the decode seconds per token), and a line without `hold` comes
    from the default mode, exactly as before the mode existed."""

    policy: str
    hot_blocks: int
    host_blocks: int
    totals: SimTotals
    num_prefetched_blocks: int = 0
    num_prefetch_used_blocks: int = 0
    num_prefetch_wasted_blocks: int = 0
    num_evictions: int = 0
    wall_s: float = 0.0
    interactive: SimTotals | None = None   # the default-tier requests alone, when some were flex
    num_flex_evictions: int = 0
    hold_decode_s_per_token: float | None = None   # None: released at once (no `hold`)

    def to_json(self) -> dict:
        totals = self.totals
        blocks = max(totals.num_blocks, 1)
        ttfts = sorted(totals.ttfts_s)
        resolved = self.num_prefetch_used_blocks + self.num_prefetch_wasted_blocks
        return {
            "policy": self.policy,
            "hot_blocks": self.hot_blocks,
            "host_blocks": self.host_blocks,
            "requests": totals.num_requests,
            "block_hit_rate": round(totals.block_hit_rate(), 6),
            "token_hit_rate": round(totals.num_hit_tokens / max(totals.num_prompt_tokens, 1), 6),
            "host_hit_rate": round(totals.num_host_hit_blocks / blocks, 6),
            "sim_ttft_p50_s": _rounded(quantile(ttfts, 0.5)),
            "sim_ttft_p99_s": _rounded(quantile(ttfts, 0.99)),
            "sim_ttft_mean_s": _rounded(totals.ttft_mean_s()),
            "prefetch_used_frac": _rounded(self.num_prefetch_used_blocks / resolved if resolved else None, 4),
            "prefetched_blocks": self.num_prefetched_blocks,
            "evictions": self.num_evictions,
            "wall_s": round(self.wall_s, 3),
            **self._interactive_json(),
            **self._hold_json(),
        }

    def _hold_json(self) -> dict:
        """For a replay where requests held their blocks until they ended: the mode and its
        decode seconds per token (none in the default mode)."""
        if self.hold_decode_s_per_token is None:
            return {}
        return {"hold": True, "decode_s_per_token": self.hold_decode_s_per_token}

    def _interactive_json(self) -> dict:
        """For a trace with flex requests: the default-tier requests' own hit rate and TTFT."""
        interactive = self.interactive
        if interactive is None:
            return {}
        return {"flex_requests": self.totals.num_requests - interactive.num_requests,
                "flex_evictions": self.num_flex_evictions,
                "interactive_block_hit_rate": round(interactive.block_hit_rate(), 6),
                "interactive_ttft_p50_s": _rounded(quantile(sorted(interactive.ttfts_s), 0.5)),
                "interactive_ttft_mean_s": _rounded(interactive.ttft_mean_s())}
