"""The Conversations API's store: the archive's calls made on one thread of their own.

Invariants:
- the event loop never touches the file: every call runs on the store's one thread, in
  the order it was made, so a turn's items added when its response finished are there
  for the next turn's read, however soon it comes;
- a conversation or item that is not there is a 404 naming it (another tenant's ids
  read the same as unknown ones); an archive that fails (a full disk) is a 500 saying so,
  logged at most once a minute per operation;
- `append` (a finished response's items) is awaited before the client reads the
  response's end (`responses_routes`), so a turn answered as a success is in its
  conversation; an append that fails (a full disk, a lock held past SQLite's timeout) is
  the 500 saying so, and a conversation deleted meanwhile takes nothing (no error: there
  is nothing left to continue);
- a new conversation that would push out only conversations a response runs on (the
  archive's `Full`) is a 429 `rate_limit_exceeded` with `Retry-After`, as one background
  response too many is: such a conversation is never evicted, or its turn's items would be
  dropped when it ends (QA154);
- items an add is given a `cap` for (`[server] conversation_bytes_per_tenant`) that would
  take the tenant's past it (the archive's `OverCap`) are a 400
  `conversation_storage_limit_exceeded` (gateway/conversation_bytes.py), nothing kept; so
  is a finished response's turn `append` is given a cap for (never swallowed as a
  conversation deleted meanwhile is).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.conversation_archive import ConversationArchive, Full, Missing
from gateway.conversation_bytes import OverCap, conversation_storage_full
from gateway.errors import ApiError, rate_limited
from gateway.store_thread import StoreThread

log = logging.getLogger("stepahead.gateway")


# the archive's operations whose names say no verb, as a failure's message says them
SAID = {"page": "list items", "items": "read the items", "get": "read the conversation"}


def not_found(missing: Missing) -> ApiError:
    what = "Conversation" if missing.what == "conversation" else "Item"
    param = "conversation_id" if missing.what == "conversation" else "item_id"
    return ApiError(404, f"{what} with id '{missing.name}' not found.", "invalid_request_error", "not_found", param)


def full(refused: Full) -> ApiError:
    return rate_limited(f"Too many conversations in use: a new one would push out a conversation that a response is "
                        f"running on ({refused.held} of this tenant's are in use, and a tenant keeps at most "
                        f"{refused.capacity}: `[server] conversations_per_tenant`). A conversation in use is never "
                        "evicted; retry once one of those responses has ended, or delete a conversation.",
                        retry_after_s=1)


class ConversationStore:
    def __init__(self, archive: ConversationArchive) -> None:
        self.archive = archive
        self._thread = StoreThread("stepahead-conversations", "the conversation store")

    def _run(self, operation: str, *args: Any) -> Any:
        """On the store's thread: `archive.<operation>(*args)`; Missing is a 404, Full a
        429, OverCap a 400."""
        try:
            return getattr(self.archive, operation)(*args)
        except Missing as missing:
            raise not_found(missing) from None
        except Full as refused:
            raise full(refused) from None
        except OverCap as refused:
            raise conversation_storage_full(refused) from None

    async def call(self, operation: str, *args: Any) -> Any:
        """`archive.<operation>(*args)` on the store's thread; what is not there is a 404,
        a failing file a 500."""
        return await self._thread.call(self._run, operation, *args,
                                       named=SAID.get(operation, operation.replace("_", " ")))

    async def append(self, tenant: str, conversation_id: str, items: list[dict], cap: int | None = None) -> None:
        """Add a finished response's items, in one transaction; returns once they are in
        the file (see the invariants: a failure is a 500 `ApiError`, items past `cap` a
        400, param `conversation`)."""
        if items:
            # a client gone meanwhile cancels no write once made: what it was not answered may be there
            await asyncio.shield(self._thread.call(self._append, tenant, conversation_id, items, cap,
                                                   named="add the response's items"))

    async def check_turn_room(self, tenant: str, items: list[dict], cap: int | None) -> None:
        """Before a response's model runs: the 400 (param `conversation`) `append` would
        answer if the turn's `items` (its input) alone would take the tenant past `cap`,
        so a turn that cannot be kept runs nothing (its reply's bytes are not known yet:
        `append` checks them all)."""
        await self._thread.call(self._check_turn_room, tenant, items, cap, named="check the conversation's room")

    def _check_turn_room(self, tenant: str, items: list[dict], cap: int | None) -> None:
        try:
            self.archive.check_room(tenant, items, cap)
        except OverCap as refused:
            raise conversation_storage_full(refused, "conversation") from None

    def _append(self, tenant: str, conversation_id: str, items: list[dict], cap: int | None) -> None:
        try:
            self.archive.add_items(tenant, conversation_id, items, cap)
        except Missing:   # deleted meanwhile
            log.info("conversation %s was deleted before its response's items were added", conversation_id)
        except OverCap as refused:
            raise conversation_storage_full(refused, "conversation") from None

    def close(self) -> None:
        """Finish pending calls and close the file."""
        self._thread.close(self.archive.close)
