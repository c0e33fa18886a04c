"""Stored responses still being answered in the foreground (`POST /v1/responses` with
`store` and without `background`, streamed or not): what GET, DELETE and input_items
find of one before its end is written to the response store (QA224 F5).

A `LiveResponse` is one such response: its snapshot (the response object with a status
and the output so far) and its input items, registered once the request is prepared and
forgotten (`end()`) once the response store answers for it (its end or failure is put
there) or the request closed without it (a client gone, a refusal). A DELETE meanwhile
marks it deleted (`delete`): its end is then never stored.

Invariants:
- a response is found only under the tenant that made it (another's: None, a 404);
- one registered is found until `end()` or `delete`, never after; `end()` again, or on
  `LiveResponse.nothing()` (a request that keeps nothing), does nothing;
- `is_deleted` once set stays set, and only a registered response is marked so (one that
  ended is the store's to delete);
- the registry holds only requests in flight: every path out of the request ends it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class LiveResponse:
    tenant: str
    response_id: str
    snapshot: Callable[[str], dict]   # the response object with this status and the output so far
    input_items: tuple[dict, ...] = ()   # the request's input, as GET .../input_items lists it
    is_deleted: bool = False   # a DELETE came while it ran: its end is not stored
    registry: "LiveResponses | None" = None   # None once it ended (or never registered)

    @classmethod
    def nothing(cls) -> "LiveResponse":
        """The handle of a request that registers nothing (`store: false`, background)."""
        return cls("", "", lambda status: {})

    def response(self) -> dict:
        """The response as it stands, as OpenAI shows a stored response in flight."""
        return self.snapshot("in_progress")

    def end(self) -> None:
        """Forget it: the response store answers for it from now on (or nothing does)."""
        if self.registry is not None:
            self.registry.forget(self)


@dataclass(slots=True)
class LiveResponses:
    running: dict[tuple[str, str], LiveResponse] = field(default_factory=dict)   # (tenant, response id)

    def register(self, tenant: str, response_id: str, snapshot: Callable[[str], dict],
                 input_items: tuple[dict, ...]) -> LiveResponse:
        live = LiveResponse(tenant, response_id, snapshot, input_items, registry=self)
        self.running[(tenant, response_id)] = live
        return live

    def get(self, tenant: str, response_id: str) -> LiveResponse | None:
        return self.running.get((tenant, response_id))

    def delete(self, tenant: str, response_id: str) -> bool:
        """Mark the tenant's live response deleted and forget it; False when it has none
        running by that id."""
        live = self.running.get((tenant, response_id))
        if live is None:
            return False
        live.is_deleted = True
        self.forget(live)
        return True

    def forget(self, live: LiveResponse) -> None:
        key = (live.tenant, live.response_id)
        if self.running.get(key) is live:
            del self.running[key]
        live.registry = None
