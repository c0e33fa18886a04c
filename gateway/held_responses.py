"""Responses whose archive put failed (a full disk), held on the response store's archive
thread until a put works: a mixin of `ResponseStore` (gateway/response_store.py, whose
invariant it keeps: such a response is answered from here when memory no longer has it,
never taken for deleted elsewhere, and written to the archive, oldest first, once the
archive works again, at most `capacity` per tenant held; a delete forgets it).

Only the archive thread calls these.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.response_store import StoredResponse


@dataclass(slots=True)
class HeldResponse:
    """A response whose archive put failed, kept on the archive thread until a put works;
    `used_s`: when it was last used, on the archive's clock (the time its row would have)."""

    stored: StoredResponse
    used_s: float


class HeldResponses:
    """Uses the store's `_held` (tenant -> id -> HeldResponse, least recently used first),
    `capacity`, `archive`, `_write` and `_failures`."""

    __slots__ = ()

    def _hold(self, tenant: str, stored: StoredResponse) -> None:
        """Keep a response the archive failed to take, as its most recently used."""
        held = self._held.setdefault(tenant, OrderedDict())
        held[stored.response["id"]] = HeldResponse(stored, self.archive.clock())
        held.move_to_end(stored.response["id"])
        while len(held) > self.capacity:
            held.popitem(last=False)

    def _let_go(self, tenant: str, response_id: str) -> HeldResponse | None:
        """Forget a held response (the archive has it, or it was deleted): it, or None."""
        held = self._held.get(tenant)
        found = held.pop(response_id, None) if held is not None else None
        if held is not None and not held:
            del self._held[tenant]
        return found

    def _held_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """A held response, marked as used now (as the archive would mark its row); None
        when it is not held."""
        held = self._held.get(tenant)
        found = held.get(response_id) if held is not None else None
        if found is None:
            return None
        held.move_to_end(response_id)
        found.used_s = self.archive.clock()
        return found.stored

    def _write_held(self) -> None:
        """Write the held responses to the archive, each tenant's least recently used first
        and each with its time of use (so the archive keeps and trims the rows it would have
        kept had each put worked), until one fails (the disk still full: the rest wait)."""
        for tenant in list(self._held):
            while tenant in self._held:
                response_id, found = next(iter(self._held[tenant].items()))
                try:
                    self._write(tenant, found.stored, False, found.used_s)
                except Exception:  # NOTE: as in `_archive_quietly`; the put it makes again was counted
                    self._failures.log("put", "stepahead: warning: the response archive failed to %s", "put")
                    return
                self._let_go(tenant, response_id)

