"""Stored responses of the Responses API, for `previous_response_id` and GET by id.

Invariants: a response is found only by the tenant that created it (another tenant gets
the same 404 as for an unknown id); the store holds at most `capacity` responses, the
least recently used leaving first; nothing is stored for `store: false`.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_CAPACITY = 4096


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response object and the whole conversation it ended, as chat messages (its
    input, earlier turns included, then its output), so the next turn can continue it."""

    response: dict
    messages: tuple[dict, ...]


class ResponseStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()

    def put(self, tenant: str, stored: StoredResponse) -> None:
        key = (tenant, stored.response["id"])
        self._entries[key] = stored
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        stored = self._entries.get((tenant, response_id))
        if stored is not None:
            self._entries.move_to_end((tenant, response_id))
        return stored

    def delete(self, tenant: str, response_id: str) -> bool:
        """Forget the response; False when this tenant has none by that id."""
        return self._entries.pop((tenant, response_id), None) is not None

    def __len__(self) -> int:
        return len(self._entries)
