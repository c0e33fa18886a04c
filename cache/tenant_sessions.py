"""Each tenant's sessions in order of activity, and which tenant holds the most: whom a
bounded table of sessions shared by tenants drops one of for room (the tracer's live
sessions, `agents_trace.sessions`; the gap forecaster's waiting ones,
`cache.gap_forecaster`), so that one tenant's flood never pushes out another's.

Invariants: a tenant's sessions are kept least recently active first; `to_evict(opener)`
is the least recently active session of the tenant holding the most, the opener's new
one counted (ties: the opener, then the tenant that reached that count first), so a
tenant holding at most N / T of N live sessions (T tenants, the opener included) never
loses one to another's new session. Every call is O(1): tenants sit in buckets by live
count, and a count moves by one at a time.
"""
from __future__ import annotations

from collections import OrderedDict


class TenantSessions:
    __slots__ = ("_by_tenant", "_tenants_by_count", "_most")

    def __init__(self) -> None:
        self._by_tenant: dict[str, OrderedDict[str, None]] = {}   # each tenant's, by last activity
        self._tenants_by_count: dict[int, dict[str, None]] = {}   # live count -> tenants, by arrival
        self._most = 0   # the largest live count of a tenant

    def add(self, tenant: str, session: str) -> None:
        own = self._by_tenant.setdefault(tenant, OrderedDict())
        own[session] = None
        self._recount(tenant, len(own) - 1, len(own))

    def remove(self, tenant: str, session: str) -> None:
        own = self._by_tenant[tenant]
        del own[session]
        self._recount(tenant, len(own) + 1, len(own))
        if not own:
            del self._by_tenant[tenant]

    def touch(self, tenant: str, session: str) -> None:
        """`session` was active now: it leaves its tenant's last."""
        self._by_tenant[tenant].move_to_end(session)

    def to_evict(self, opener: str) -> tuple[str, str]:
        """(tenant, session) to end for room when `opener` opens a session (there is one)."""
        own = self._by_tenant.get(opener)
        tenant = opener if own and len(own) >= self._most else next(iter(self._tenants_by_count[self._most]))
        return tenant, next(iter(self._by_tenant[tenant]))

    def _recount(self, tenant: str, old: int, new: int) -> None:
        """Move `tenant` from the bucket of `old` live sessions to that of `new` (one more
        or one fewer; 0 has no bucket) and keep `_most` the largest count held."""
        if old:
            bucket = self._tenants_by_count[old]
            del bucket[tenant]
            if not bucket:
                del self._tenants_by_count[old]
        if new:
            self._tenants_by_count.setdefault(new, {})[tenant] = None
        if new > self._most:
            self._most = new
        elif old == self._most and old not in self._tenants_by_count:
            self._most = new
