"""Every tenant's limiter (gateway/limits.py), across reloads of the tenants, with the
tokens each spent restored at the start and shared with other gateways
(gateway/spent_tokens.py).

Invariants: a tenant a reload removed keeps its limiter for the requests it still has
running (they release into it) but is no longer listed by `items`; spent counts never go
below zero. A budget counts from when it is set, at a reload as at a start: a tenant
that has a `token_budget` when the gateway starts, or when a reload adds it or gives it
a budget it did not have, starts from the tokens on file for it (0 when none), never
from what it spent here without one (QA145); a budget changed keeps its count. A tenant
without a budget counts what it is charged here only (from 0, or from its count when a
reload lifted its budget; the file's count and other gateways' spending are not added).
A budget a reload lifts leaves its count as it was then to be saved (`saved_counts`), and
what the requests admitted under it charge once they end (QA162), and one set again starts
from that count, saved yet or not: no token spent under a budget is forgotten by lifting
it (QA151).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from gateway.config import LimitsConfig
from gateway.limits import TenantLimiter


class Limiters:
    """One `TenantLimiter` per configured tenant. A tenant a reload removed keeps its
    limiter for the requests it still has running (they release into it), but is no
    longer listed by `items`."""

    __slots__ = ("_by_tenant", "_removed", "_queue_timeout_s", "_clock", "_spent_on_file", "_lifted")

    def __init__(self, limits_by_tenant: dict[str, LimitsConfig], *,
                 queue_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._queue_timeout_s = queue_timeout_s
        self._clock = clock
        self._spent_on_file: dict[str, int] = {}   # what a budget set from now on starts from
        self._lifted: dict[str, int] = {}   # a tenant whose budget a reload lifted: its count then
        self._by_tenant = {tenant: self._new(tenant, limits) for tenant, limits in limits_by_tenant.items()}
        self._removed: dict[str, TenantLimiter] = {}

    def _new(self, tenant: str, limits: LimitsConfig) -> TenantLimiter:
        limiter = TenantLimiter(tenant, limits, queue_timeout_s=self._queue_timeout_s, clock=self._clock)
        if limits.token_budget is not None:
            limiter.num_spent_tokens = self._spent_on_file.get(tenant, 0)
        return limiter

    def restore_spent(self, spent_by_tenant: Mapping[str, int]) -> None:
        """Resume the tokens tenants spent before this process (gateway/spent_tokens.py),
        for the budgeted tenants configured now and those a reload budgets later."""
        self._spent_on_file = dict(spent_by_tenant)
        for tenant, limiter in self._by_tenant.items():
            if limiter.limits.token_budget is not None:
                limiter.num_spent_tokens = max(limiter.num_spent_tokens, self._spent_on_file.get(tenant, 0))

    def _every_limiter(self) -> list[tuple[str, TenantLimiter]]:
        """Each tenant's limiter, running or removed by a reload (safe from another
        thread: the dicts are copied before they are walked)."""
        return list(self._by_tenant.items()) + list(self._removed.items())

    def spent_by_tenant(self) -> dict[str, int]:
        """The tokens spent by each tenant, running or removed by a reload."""
        return {tenant: limiter.num_spent_tokens for tenant, limiter in self._every_limiter()}

    def budgeted_tenants(self) -> set[str]:
        """The tenants whose counts are saved: those, running or removed by a reload, that
        have a `token_budget`, and those whose budget a reload lifted."""
        return {tenant for tenant, limiter in self._every_limiter()
                if limiter.limits.token_budget is not None} | self._lifted.keys()

    def saved_counts(self) -> dict[str, int]:
        """The counts to save: `spent_by_tenant`, but a tenant whose budget a reload lifted
        has the count it had then (what it spends without one is not saved)."""
        return self.spent_by_tenant() | {tenant: num + self[tenant].num_spent_after_budget
                                         for tenant, num in list(self._lifted.items())}

    def add_spent(self, spent_elsewhere: Mapping[str, int], spent_on_file: Mapping[str, int]) -> None:
        """Count tokens spent elsewhere (other gateways sharing the spent-tokens file;
        negative: given back by an edit of it) into the budgeted tenants' counts, never
        below zero; `spent_on_file` (the file's counts with `spent_elsewhere` in them) is
        what a budget set from now on starts from. On the event loop's thread, as every
        other change to the counts."""
        for tenant, num_tokens in spent_elsewhere.items():
            limiter = self._by_tenant.get(tenant) or self._removed.get(tenant)
            if tenant in self._lifted:
                self._lifted[tenant] = max(0, self._lifted[tenant] + num_tokens)
            elif limiter is not None and limiter.limits.token_budget is not None:
                limiter.num_spent_tokens = max(0, limiter.num_spent_tokens + num_tokens)
        self._spent_on_file = dict(spent_on_file)

    def budget_room(self, tenant: str) -> int | None:
        """`TenantLimiter.budget_room` of `tenant` (None for a tenant without a budget, or
        none here): what one request of it that sets no `max_tokens` may reserve. In memory
        only, so a backend may ask it while it prepares a request."""
        limiter = self._by_tenant.get(tenant) or self._removed.get(tenant)
        return None if limiter is None else limiter.budget_room()

    def __getitem__(self, tenant: str) -> TenantLimiter:
        limiter = self._by_tenant.get(tenant)
        return limiter if limiter is not None else self._removed[tenant]

    def update(self, limits_by_tenant: dict[str, LimitsConfig]) -> None:
        """The tenants and limits of a reloaded config: a kept tenant's limiter is
        retuned (its running and queued requests and spent budget stay; a budget it did
        not have starts from the tokens on file for it, as at a start), a new one made,
        and a removed one kept aside for the requests it still has running."""
        by_tenant = {}
        for tenant, limits in limits_by_tenant.items():
            limiter = self._by_tenant.get(tenant) or self._removed.pop(tenant, None)
            if limiter is None:
                limiter = self._new(tenant, limits)
            elif limiter.limits.token_budget is None and limits.token_budget is not None:
                lifted = self._lifted.pop(tenant, None)
                limiter.num_spent_tokens = (self._spent_on_file.get(tenant, 0) if lifted is None
                                            else lifted + limiter.num_spent_after_budget)
            elif limiter.limits.token_budget is not None and limits.token_budget is None:
                self._lifted[tenant] = limiter.num_spent_tokens
                limiter.num_spent_after_budget = 0
            limiter.retune(limits)
            by_tenant[tenant] = limiter
        for tenant, limiter in self._by_tenant.items():
            if tenant not in by_tenant:
                self._removed[tenant] = limiter
        self._by_tenant = by_tenant

    def items(self):
        return self._by_tenant.items()
