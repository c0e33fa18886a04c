"""Per-tenant reservations of HOT blocks: a guaranteed share, and a shared pool to borrow.

Each tenant is guaranteed `reserved(t)` HOT blocks; the rest of the tier is a pool any
tenant may borrow. Eviction first takes from tenants holding more than their share, so a
noisy tenant churns its own (and other borrowers') blocks before anyone's reservation.
The plan is recomputed every few minutes from each tenant's forecast demand:

    reserved(t) = reserve_frac * capacity * (equal_frac / T + (1 - equal_frac) * demand(t) / total)

over the T tenants with demand, or fixed shares when configured (`static_shares`,
fractions of the tier). Invariant: the reservations sum to at most
`reserve_frac * capacity` (static shares: to what was configured).
"""
from __future__ import annotations

from collections.abc import Mapping


def check_static_shares(shares: Mapping[str, float]) -> None:
    """ValueError unless the fractions are non-negative and sum to at most 1."""
    if any(not share >= 0 for share in shares.values()) or sum(shares.values()) > 1.0 + 1e-9:
        raise ValueError("static shares must be non-negative and sum to at most 1")


class ReservationPlan:
    __slots__ = ("reserve_frac", "equal_frac", "_static", "_reserved", "planned_at_s")

    def __init__(self, reserve_frac: float, equal_frac: float, static_shares: Mapping[str, float] | None = None) -> None:
        if not (0.0 <= reserve_frac <= 1.0 and 0.0 <= equal_frac <= 1.0):
            raise ValueError("reserve_frac and equal_frac must lie in [0, 1]")
        self.reserve_frac = reserve_frac
        self.equal_frac = equal_frac
        self._static: dict[str, float] | None = None
        self.set_static_shares(static_shares)
        self._reserved: dict[str, float] = {}
        self.planned_at_s: float | None = None

    def set_static_shares(self, static_shares: Mapping[str, float] | None) -> None:
        """Fix the reservations to these fractions of the tier (None: plan them from
        demand); the next `plan` applies them."""
        if static_shares is not None:
            check_static_shares(static_shares)
        self._static = dict(static_shares) if static_shares is not None else None

    @property
    def reservations(self) -> dict[str, float]:
        """Each tenant's guaranteed HOT blocks as last planned."""
        return dict(self._reserved)

    @property
    def is_active(self) -> bool:
        return bool(self._reserved)

    def reserved(self, tenant: str) -> float:
        return self._reserved.get(tenant, 0.0)

    def plan(self, capacity: int, demands: Mapping[str, float], now_s: float) -> None:
        """Re-plan from each tenant's forecast demand (blocks it expects to need)."""
        self.planned_at_s = now_s
        if self._static is not None:
            self._reserved = {tenant: share * capacity for tenant, share in self._static.items()}
            return
        active = {tenant: max(0.0, demand) for tenant, demand in demands.items() if demand > 0.0}
        if not active or self.reserve_frac == 0.0:
            self._reserved = {}
            return
        total = sum(active.values())
        budget = self.reserve_frac * capacity
        equal = self.equal_frac / len(active)
        self._reserved = {
            tenant: budget * (equal + (1.0 - self.equal_frac) * demand / total) for tenant, demand in active.items()
        }

    def is_over(self, tenant: str, num_blocks: int) -> bool:
        """Whether `tenant` holds more blocks than it is guaranteed (it is borrowing)."""
        return num_blocks > self._reserved.get(tenant, 0.0)
