"""A session's name below the gateway: namespaced by tenant.

Invariant: every session id that reaches the engine (a request's WorkItem, a forecast)
went through `engine_session_key`, traced or not, so equal client session ids of two
tenants never share router affinity, pins or prefetches.
"""
from __future__ import annotations


def engine_session_key(tenant: str, session: str) -> str:
    """The session's name below the gateway: the tenant's name, its length first, then the
    client's id. Distinct (tenant, session) pairs never give the same key, whatever either
    holds (with "tenant/session", tenant "t" session "x/s" and tenant "t/x" session "s"
    were one session to the router and the cache policies)."""
    return f"{len(tenant)}:{tenant}/{session}"
