"""Which admitted prefill runs its next chunk (a worker's `prefill_order` option).

Invariants:
- a prefill whose tenant is past its weighted share of the slots always comes after
  every prefill whose tenant is within it;
- "arrival": then the tenant holding the fewest slots for its weight, then the oldest
  (the order before "deadline" existed);
- "deadline" (the default): then the earliest deadline `admitted_s + remaining tokens ×
  seconds per token × the tenant's slots for its weight`. Within a tenant that is
  shortest remaining prefill first — an agent step whose context is cached is a few
  hundred new tokens and no longer waits behind a cold multi-thousand-token prompt — with
  aging: a prefill never waits longer than its own (scaled) remaining time behind
  prefills admitted after it. Across tenants, the scale is the fair part: a tenant
  holding many slots (a burst) sees its work stretched, so a quiet tenant's prompt of
  the same length goes first, as in "arrival". Seconds per token is a running mean over
  the chunks this worker computed;
- ties go to the older prefill.
"""
from __future__ import annotations

from dataclasses import dataclass

PREFILL_ORDERS = ("deadline", "arrival")
INITIAL_S_PER_TOKEN = 1e-3  # replaced by measurements after the first chunk
SMOOTHING = 0.2  # weight of each new chunk's measurement


@dataclass(slots=True)
class PrefillOrder:
    kind: str = "deadline"
    s_per_token: float = INITIAL_S_PER_TOKEN

    def __post_init__(self) -> None:
        if self.kind not in PREFILL_ORDERS:
            raise ValueError(f"prefill_order must be one of {', '.join(PREFILL_ORDERS)}, not {self.kind!r}")

    def observe(self, num_tokens: int, seconds: float) -> None:
        """One computed chunk of `num_tokens` prompt tokens that took `seconds`."""
        if num_tokens > 0 and seconds > 0:
            self.s_per_token += SMOOTHING * (seconds / num_tokens - self.s_per_token)

    def key(self, *, past_share: bool, slots_per_weight: float, admitted_s: float,
            num_remaining_tokens: int, arrival_index: int) -> tuple:
        if self.kind == "arrival":
            return (past_share, slots_per_weight, arrival_index)
        return (past_share, admitted_s + num_remaining_tokens * self.s_per_token * slots_per_weight,
                arrival_index)
