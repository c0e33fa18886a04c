"""Stored responses of the Responses API, for `previous_response_id` and GET by id.

Invariants: a response is found only by the tenant that created it (another tenant gets
the same 404 as for an unknown id); each tenant holds at most `capacity` responses, its
least recently used leaving first, so one tenant's traffic never pushes out another's;
nothing is stored for `store: false`.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict
from dataclasses import dataclass

DEFAULT_CAPACITY = 1024  # per tenant


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response object and the whole conversation it ended, as chat messages (its
    input, earlier turns included, then its output), so the next turn can continue it."""

    response: dict
    messages: tuple[dict, ...]


class ResponseStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._by_tenant: defaultdict[str, OrderedDict[str, StoredResponse]] = defaultdict(OrderedDict)

    def put(self, tenant: str, stored: StoredResponse) -> None:
        entries = self._by_tenant[tenant]
        response_id = stored.response["id"]
        entries[response_id] = stored
        entries.move_to_end(response_id)
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        entries = self._by_tenant.get(tenant)
        stored = entries.get(response_id) if entries is not None else None
        if stored is not None:
            entries.move_to_end(response_id)
        return stored

    def delete(self, tenant: str, response_id: str) -> bool:
        """Forget the response; False when this tenant has none by that id."""
        entries = self._by_tenant.get(tenant)
        return entries is not None and entries.pop(response_id, None) is not None

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_tenant.values())
