"""Per-minute token buckets of a tenant's limits (gateway/limits.py): requests or tokens a
minute, refilled continuously, and what a reload does to them.

Invariant: `resized` keeps a bucket whose size is unchanged as it is, and one resized at
its current level clamped to the new size: a reload refills nothing the tenant spent.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """Holds up to `capacity`; refills continuously at `refill_per_s`; may go negative."""

    capacity: float
    refill_per_s: float
    level: float
    updated_s: float

    @classmethod
    def per_minute(cls, amount: int, now_s: float) -> "TokenBucket":
        return cls(capacity=float(amount), refill_per_s=amount / 60.0, level=float(amount),
                   updated_s=now_s)

    def refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self.updated_s)
        self.level = min(self.capacity, self.level + elapsed_s * self.refill_per_s)
        self.updated_s = now_s

    def seconds_until(self, amount: float) -> float | None:
        """Seconds until `amount` fits (0 if it fits now); None if it never can."""
        if amount > self.capacity or self.refill_per_s <= 0:
            return None
        return max(0.0, (amount - self.level) / self.refill_per_s)


def duration_text(seconds: float) -> str:
    """A wait as OpenAI writes it in `x-ratelimit-reset-*`: `0s`, `20ms`, `1.5s`, `6m0s`, `1h2m3s`."""
    millis = max(0, round(seconds * 1000))
    if 0 < millis < 1000:
        return f"{millis}ms"
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "") + f"{secs}s"


def keeping_spent(bucket: TokenBucket | None, amount: int | None, now_s: float) -> TokenBucket | None:
    """The per-minute bucket of `amount` (None: no limit) that replaces `bucket` at a
    reload: `bucket` itself when its size is unchanged, a full one when there was none,
    else one that keeps what the tenant spent (or reserved) in the window as it stands
    now, clamped to the new size: its level is the new size less that, at least 0, or
    the old bucket's debt where it was in debt (FI150: it kept the old level instead, so a
    lowered limit handed out more and a raised one kept a tenant blocked)."""
    if amount is None:
        return None
    if bucket is None:
        return TokenBucket.per_minute(amount, now_s)
    if bucket.capacity == amount:
        return bucket
    bucket.refill(now_s)
    spent = bucket.capacity - bucket.level
    kept = TokenBucket.per_minute(amount, now_s)
    kept.level = max(min(bucket.level, 0.0), kept.capacity - spent)
    return kept
