"""TTL pins across tool calls (Continuum-style), capped per tenant.

When a response ends in tool calls the session's blocks are pinned until the forecast
return-time quantile has passed. A pin is a value floor, not a lock: while it lasts the
blocks keep at least the value they had when the tool call began (an overdue tool does
not fade), so lower-valued blocks go first; a higher-valued block that needs the room
still takes it (no wedge), and a tenant may pin at most `cap` blocks at once (a new pin
that does not fit is refused).

Invariants: `num_pinned_blocks(t)` is the sum of the sizes of `t`'s live pins (the blocks
counted against its cap: a pin's size is fixed when it is set, a pinned block may still
yield its room); every deadline is finite; a pin is live until `expire` passes its deadline
or `unpin` ends it (the session came back). Each `pin` call adds one to exactly one of
`num_set` and `num_refused` (counts since the book was made, never reset).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


@dataclass(slots=True)
class PinCounts:
    """What a pinning policy counted since it started, for its worker's stats. None: the
    policy has no such outcome (no per-tenant cap to refuse by; no TTL choice to decline)."""
    num_set: int
    num_refused: int | None = None
    num_declined: int | None = None


@dataclass(slots=True)
class Pin:
    tenant: str
    until_s: float
    num_blocks: int
    floor: float


class PinBook:
    __slots__ = ("_pins", "_num_blocks", "_deadlines", "num_set", "num_refused")

    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._num_blocks: dict[str, int] = {}
        self._deadlines: list[tuple[float, str]] = []
        self.num_set = 0
        self.num_refused = 0

    def num_pinned_blocks(self, tenant: str) -> int:
        return self._num_blocks.get(tenant, 0)

    def pinned_blocks(self) -> dict[str, int]:
        """`num_pinned_blocks` of every tenant that has pinned (0 once its pins ended): a copy."""
        return dict(self._num_blocks)

    def counts(self) -> PinCounts:
        return PinCounts(self.num_set, num_refused=self.num_refused)

    def is_pinned(self, session: str, now_s: float) -> bool:
        pin = self._pins.get(session)
        return pin is not None and pin.until_s > now_s

    def get(self, session: str) -> Pin | None:
        return self._pins.get(session)

    def pin(self, session: str, tenant: str, until_s: float, num_blocks: int, cap: float, floor: float) -> bool:
        """Pin `session` (replacing its old pin) unless the tenant's cap would overflow or
        `until_s` is not finite (a NaN deadline at the top of the heap would stop every
        later pin from expiring; refused, as a pin over the cap)."""
        self.unpin(session)
        if not math.isfinite(until_s) or self.num_pinned_blocks(tenant) + num_blocks > cap:
            self.num_refused += 1
            return False
        self._pins[session] = Pin(tenant, until_s, num_blocks, floor)
        self._num_blocks[tenant] = self.num_pinned_blocks(tenant) + num_blocks
        heapq.heappush(self._deadlines, (until_s, session))
        self.num_set += 1
        return True

    def unpin(self, session: str) -> bool:
        pin = self._pins.pop(session, None)
        if pin is None:
            return False
        self._num_blocks[pin.tenant] -= pin.num_blocks
        return True

    def expire(self, now_s: float) -> list[str]:
        """End every pin whose deadline passed; returns their sessions."""
        ended: list[str] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_s:
            until_s, session = heapq.heappop(deadlines)
            pin = self._pins.get(session)
            if pin is not None and pin.until_s == until_s:
                self.unpin(session)
                ended.append(session)
        return ended
