"""Stored responses of the Responses API, for `previous_response_id` and GET by id.

Invariants:
- a response is found only by the tenant that created it (another tenant gets the same
  404 as for an unknown id);
- each tenant holds at most `capacity` responses in memory (and as many on disk), its
  least recently used leaving first, so one tenant's traffic never pushes out another's;
  memory and the archive agree on that order (a read from memory marks the row used);
- with an archive (`gateway.response_archive`), every put and delete is also applied to
  it, in order, on one background thread: the request path never waits on a disk write,
  a response evicted from memory is read back from disk, and after a restart the
  archive answers for the responses stored before it; `close()` waits for pending writes;
  an archive that fails (a full disk) leaves memory serving, its failures logged at most
  once a minute per operation;
- nothing is stored for `store: false` (the caller does not put it).
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cache.repeated_failures import RepeatedFailures
from gateway.store_thread import STORE_FAILURES

if TYPE_CHECKING:
    from gateway.response_archive import ResponseArchive

DEFAULT_CAPACITY = 1024  # per tenant
log = logging.getLogger("stepahead.gateway")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response object and the whole conversation it ended, as chat messages (its
    input, earlier turns included, then its output), so the next turn can continue it;
    and its own input as Responses items, for listing."""

    response: dict
    messages: tuple[dict, ...]
    input_items: tuple[dict, ...] = ()


class ResponseStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, archive: "ResponseArchive | None" = None) -> None:
        self.capacity = capacity
        self.archive = archive
        self._by_tenant: defaultdict[str, OrderedDict[str, StoredResponse]] = defaultdict(OrderedDict)
        self._archivist: ThreadPoolExecutor | None = None
        self._failures = RepeatedFailures(log, expected=STORE_FAILURES)   # on the archive thread only
        self.num_archive_failures = 0   # archive calls that failed (memory served instead)
        if archive is not None:
            self._archivist = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stepahead-responses")

    def _remember(self, tenant: str, stored: StoredResponse) -> None:
        entries = self._by_tenant[tenant]
        response_id = stored.response["id"]
        entries[response_id] = stored
        entries.move_to_end(response_id)
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def put(self, tenant: str, stored: StoredResponse) -> None:
        self._remember(tenant, stored)
        if self._archivist is not None:
            self._archivist.submit(self._archive_quietly, "put", tenant, stored)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        entries = self._by_tenant.get(tenant)
        stored = entries.get(response_id) if entries is not None else None
        if stored is not None:
            entries.move_to_end(response_id)
            if self._archivist is not None:   # the archive's order of use follows memory's
                self._archivist.submit(self._archive_quietly, "touch", tenant, response_id)
            return stored
        if self._archivist is None:
            return None
        stored = await asyncio.wrap_future(
            self._archivist.submit(self._archive_quietly, "get", tenant, response_id))
        if stored is not None:
            self._remember(tenant, stored)
        return stored

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forget the response; False when this tenant has none by that id."""
        entries = self._by_tenant.get(tenant)
        found = entries is not None and entries.pop(response_id, None) is not None
        if self._archivist is not None:
            found = bool(await asyncio.wrap_future(
                self._archivist.submit(self._archive_quietly, "delete", tenant, response_id))) or found
        return found

    def _archive_quietly(self, operation: str, *args):
        """One archive call on the archive thread; a disk error is logged and reads as
        "not there", so the Responses API degrades to memory instead of failing."""
        try:
            return getattr(self.archive, operation)(*args)
        except Exception:  # NOTE: sqlite3 errors, a full disk, a read-only directory
            self.num_archive_failures += 1
            self._failures.log(operation, "the response archive failed to %s", operation)
            return None

    def close(self) -> None:
        """Finish pending archive writes and close the file."""
        if self._archivist is not None:
            self._archivist.submit(self.archive.close)
            self._archivist.shutdown(wait=True)
            self._archivist = None

    def __len__(self) -> int:
        """Responses held in memory."""
        return sum(len(entries) for entries in self._by_tenant.values())
