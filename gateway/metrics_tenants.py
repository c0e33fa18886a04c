"""The tenants' gauges on `GET /metrics`: each tenant's running and queued requests, and
its token budget and the tokens it spent.

Invariant: an admin sees every configured tenant, and a tenant a reload removed for as
long as it still has requests running or queued (they finish), so the drain can be
watched; a tenant's key sees its own tenant only.
"""
from __future__ import annotations

from gateway.limiters import Limiters
from gateway.limits import TenantLimiter
from gateway.metrics import Labels


def listed_limiters(limiters: Limiters, tenant: str | None) -> list[tuple[str, TenantLimiter]]:
    """`tenant`'s limiter; with None (an admin), the configured tenants' and those of the
    removed tenants that still have requests."""
    if tenant is not None:
        return [(tenant, limiters[tenant])]
    listed = list(limiters.items())
    configured = {name for name, _ in listed}
    for name in limiters.spent_by_tenant():   # every tenant, running or removed by a reload
        if name not in configured and (limiters[name].num_active or limiters[name].num_queued):
            listed.append((name, limiters[name]))
    return listed


def tenant_gauges(listed: list[tuple[str, TenantLimiter]]) -> dict[tuple[str, Labels], float]:
    gauges: dict[tuple[str, Labels], float] = {}
    for name, limiter in listed:
        labels = (("tenant", name),)
        gauges[("stepahead_tenant_active_requests", labels)] = limiter.num_active
        gauges[("stepahead_tenant_queued_requests", labels)] = limiter.num_queued
        if limiter.limits.token_budget is not None:
            gauges[("stepahead_tenant_token_budget", labels)] = limiter.limits.token_budget
            gauges[("stepahead_tenant_spent_tokens", labels)] = limiter.num_spent_tokens
    return gauges
