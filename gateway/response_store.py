"""Stored responses of the Responses API, for `previous_response_id` and GET by id.

Invariants:
- a response is found only by the tenant that created it (another tenant gets the same
  404 as for an unknown id);
- each tenant holds at most `capacity` responses in memory (and as many on disk), its
  least recently used leaving first, so one tenant's traffic never pushes out another's;
  memory and the archive agree on that order (a read from memory marks the row used);
  a background response still `queued` or `in_progress` never leaves (memory, or the
  archive's trim): it counts toward `capacity` and the finished ones leave in its stead
  (`num_unfinished`: `responses_routes` refuses a background request that would leave no
  place for a finished one), so the id its POST handed out answers until it ends, and
  its end is stored;
- with an archive (`gateway.response_archive`), every put and delete is also applied to
  it, in order, on one background thread (never the event loop): a response evicted from
  memory is read back from disk, and after a restart the archive answers for the
  responses stored before it; `close()` waits for pending writes; an archive that fails
  (a full disk) leaves memory serving, its failures logged at most once a minute per
  operation;
- a durable put (`put_and_wait(durable=True)`: a response about to be answered, a
  background one's `queued` row) is waited for, and one the archive cannot take is a 500,
  the response forgotten: what a client was answered survives a crash and is found by
  another gateway sharing the file;
- a response whose other put failed is held for the archive (at most `capacity` per tenant, its
  least recently used leaving first), on the archive thread: it is answered from there
  when memory no longer has it, never taken for deleted elsewhere (the archive never had
  it), and written to the archive, oldest first, after each archive call that succeeds
  (the disk has room again: one failed write ends the try) and at `close()`, so it
  survives a restart once the disk has room; a delete forgets it;
- nothing is stored for `store: false` (the caller does not put it);
- a background response still `queued` or `in_progress` is archived with its owner: this
  process, which holds a claim (an advisory lock, `gateway.directory_claim`) on
  `<archive>.owners/<owner>.lock` from before its first such row until `close()`; the
  claim dies with the process. Such a row read from the archive is answered as it stands
  while its owner lives (another gateway sharing the file runs it; memory does not keep
  it, so the next read sees that gateway's later writes), and once its owner is gone
  (killed, crashed) it is stored and answered `failed` with the `stopped_error` (code
  `server_error`, as a graceful stop stores it), keeping what the row had, so a client
  polling its id learns that it ended, and that the gateway ended it, not a cancel (only
  `POST /v1/responses/{id}/cancel` or a `DELETE` makes `cancelled`), instead of getting a
  404. A row an earlier release stored `cancelled` so stays. The owner's name never leaves
  the store;
- with an archive, the archive is the truth on what still exists: a response deleted
  through another gateway sharing the file is not served from this one's memory (a read
  from memory waits for the archive to find the row), and a background run's later states
  replace its row only while it is there, so a run a client deleted elsewhere never comes
  back when it ends. An archive call that fails leaves memory answering.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cache.repeated_failures import RepeatedFailures
from gateway.held_responses import HeldResponse, HeldResponses
from gateway.response_owners import ResponseOwners
from gateway.errors import server_error
from gateway.store_thread import STORE_FAILURES

if TYPE_CHECKING:
    from gateway.response_archive import ResponseArchive

DEFAULT_CAPACITY = 1024  # per tenant
UNFINISHED = ("queued", "in_progress")   # a background response's statuses before it ends
OWNER_FIELD = "stepahead_owner"   # in an unfinished response's archived row only: the process running it
log = logging.getLogger("stepahead.gateway")


def stopped_error(how: str) -> dict:
    """The `error` ({"code", "message"}: OpenAI's `ResponseError`) of a background response
    that ended `failed` because the gateway running it stopped before it finished (`how`:
    the way it stopped, in words), not because its client cancelled it."""
    return {"code": "server_error",
            "message": f"The gateway running this background response {how} before it finished; the request "
                       "may be retried."}


KILLED = "stopped (its process was killed or crashed)"   # `stopped_error` of a run whose owner is gone
SHUT_DOWN = "was shut down"   # `stopped_error` of a run a graceful stop ended


def is_unfinished(response: dict) -> bool:
    """A background response that is still queued or running somewhere."""
    return response.get("background") is True and response.get("status") in UNFINISHED


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response object and the whole conversation it ended, as chat messages (its
    input, earlier turns included, then its output), so the next turn can continue it;
    and its own input as Responses items, for listing. Its messages are shared, never
    changed: a turn's history is its previous turn's messages (`to_chat_body` copies
    them), and those read back from the archive are one object per tenant and message
    (`gateway.response_messages`, which also keeps each once on disk), so a chain held
    in memory grows with its turns' new messages, not each turn's whole conversation."""

    response: dict
    messages: tuple[dict, ...]
    input_items: tuple[dict, ...] = ()


class ResponseStore(HeldResponses):
    def __init__(self, capacity: int = DEFAULT_CAPACITY, archive: "ResponseArchive | None" = None) -> None:
        self.capacity = capacity
        self.archive = archive
        self._by_tenant: defaultdict[str, OrderedDict[str, StoredResponse]] = defaultdict(OrderedDict)
        self._archivist: ThreadPoolExecutor | None = None
        self._failures = RepeatedFailures(log, expected=STORE_FAILURES)   # on the archive thread only
        self.num_archive_failures = 0   # archive calls that failed (memory served instead)
        self._owners = ResponseOwners(None if archive is None else archive.path)   # archive thread only
        self.owner = self._owners.owner   # names this process in its unfinished rows
        self._running: set[tuple[str, str]] = set()   # background responses stored queued, not yet ended
        # archive thread only: per tenant, the responses whose put failed, least recently used first
        self._held: dict[str, OrderedDict[str, HeldResponse]] = {}
        if archive is not None:
            self._archivist = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stepahead-responses")

    def _remember(self, tenant: str, stored: StoredResponse) -> None:
        """Keep `stored` as the tenant's most recently used; beyond `capacity`, its least
        recently used finished responses leave (an unfinished one never: with only those
        left, none leaves)."""
        entries = self._by_tenant[tenant]
        response_id = stored.response["id"]
        entries[response_id] = stored
        entries.move_to_end(response_id)
        while len(entries) > self.capacity:
            oldest = next((key for key, entry in entries.items() if not is_unfinished(entry.response)), None)
            if oldest is None:
                return
            del entries[oldest]

    def num_unfinished(self, tenant: str) -> int:
        """The tenant's background responses this process stored `queued` that have not
        ended yet (none of them leaves the store until it ends)."""
        return sum(owner == tenant for owner, _ in self._running)

    def put(self, tenant: str, stored: StoredResponse) -> None:
        self._put(tenant, stored)

    async def put_and_wait(self, tenant: str, stored: StoredResponse, *, durable: bool = False) -> None:
        """`put`, returning once the archive has it (or failed to: it is held). With
        `durable`, the row must be written: a response is answered (a background one's id
        handed out) only once a crash right after, or another gateway sharing the file,
        finds it; an archive that fails is a 500 (`ApiError`) saying so, and the response
        is forgotten (never held), since nothing about it was answered. A client gone
        meanwhile cancels no write. A background response's later puts, until one that is
        no longer unfinished, replace it only while the archive still has it."""
        key = (tenant, stored.response["id"])
        written = self._put(tenant, stored, durable)
        if is_unfinished(stored.response):
            self._running.add(key)
        if written is None:
            return
        try:
            await asyncio.shield(asyncio.wrap_future(written))
        except Exception as exc:   # NOTE: only a durable put raises; logged on the archive thread
            self._running.discard(key)
            entries = self._by_tenant.get(tenant)
            if entries is not None and entries.get(key[1]) is stored:
                del entries[key[1]]
            raise server_error(f"The response store could not store the response: {type(exc).__name__}: {exc}. "
                               "Nothing was kept; try again once the responses' file takes writes.") from None

    def _put(self, tenant: str, stored: StoredResponse, durable: bool = False) -> Future | None:
        key = (tenant, stored.response["id"])
        replacing = key in self._running
        if replacing and not is_unfinished(stored.response):
            self._running.discard(key)
        self._remember(tenant, stored)
        if self._archivist is None:
            return None
        if durable:
            return self._archivist.submit(self._archive_quietly, "put", self._archive_put, tenant, stored, replacing,
                                          False, raising=True)
        return self._submit("put", self._archive_put, tenant, stored, replacing)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        entries = self._by_tenant.get(tenant)
        stored = entries.get(response_id) if entries is not None else None
        if stored is not None:
            entries.move_to_end(response_id)
            if self._archivist is None:
                return stored
            # the archive's order of use follows memory's; a row gone was deleted through another gateway
            present = await asyncio.wrap_future(self._submit("touch", self._archive_touch, tenant, response_id))
            if present is False:
                entries.pop(response_id, None)
                return None
            return stored
        if self._archivist is None:
            return None
        stored = await asyncio.wrap_future(self._submit("get", self._archive_get, tenant, response_id))
        if stored is not None and not is_unfinished(stored.response):   # another gateway's run: read it again
            self._remember(tenant, stored)
        return stored

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forget the response; False when this tenant has none by that id (with an
        archive, when the archive has none: one another gateway deleted is not found again
        in this one's memory; an archive that failed leaves memory's answer)."""
        entries = self._by_tenant.get(tenant)
        found = entries is not None and entries.pop(response_id, None) is not None
        if self._archivist is not None:
            deleted = await asyncio.wrap_future(self._archivist.submit(self._archive_delete, tenant, response_id))
            found = found if deleted is None else deleted
        return found

    def _submit(self, operation: str, call: Callable, *args) -> Future:
        return self._archivist.submit(self._archive_quietly, operation, call, *args)

    def _archive_put(self, tenant: str, stored: StoredResponse, replacing: bool, hold: bool = True) -> None:
        held = self._held.get(tenant)
        if held is not None and stored.response["id"] in held:
            replacing = False   # its row was never written: this put is its first
        try:
            self._write(tenant, stored, replacing)
        except Exception:
            if hold:
                self._hold(tenant, stored)
            raise
        self._let_go(tenant, stored.response["id"])

    def _write(self, tenant: str, stored: StoredResponse, replacing: bool, used_s: float | None = None) -> None:
        if is_unfinished(stored.response):
            self._owners.claim()   # before the row that names it: a row never names an owner not yet claimed
            stored = replace(stored, response={**stored.response, OWNER_FIELD: self.owner})
        self.archive.put(tenant, stored, replacing, used_s)

    def _archive_touch(self, tenant: str, response_id: str) -> bool:
        if self._held_response(tenant, response_id) is not None:
            return True   # the archive never had it: not deleted elsewhere
        return self.archive.touch(tenant, response_id)

    def _archive_delete(self, tenant: str, response_id: str) -> bool | None:
        """The archive's delete, a held response forgotten first (found: True). None when
        the archive failed and nothing was held."""
        held = self._let_go(tenant, response_id) is not None
        deleted = self._archive_quietly("delete", self.archive.delete, tenant, response_id)
        return True if held else deleted

    def _archive_get(self, tenant: str, response_id: str) -> StoredResponse | None:
        held = self._held_response(tenant, response_id)
        if held is not None:   # this process's own, never archived: answered as memory would
            return held
        stored = self.archive.get(tenant, response_id)
        if stored is None or OWNER_FIELD not in stored.response:
            return stored
        response = dict(stored.response)
        owner = response.pop(OWNER_FIELD)
        stored = replace(stored, response=response)
        if not is_unfinished(response) or self._owners.lives(owner):
            return stored
        # as a graceful stop stores a run it ends (`background_responses.generate`): what the row had, failed
        ended = replace(stored, response={**response, "status": "failed", "error": stopped_error(KILLED)})
        self.archive.put(tenant, ended)
        return ended

    def _archive_quietly(self, operation: str, call: Callable, *args, raising: bool = False):
        """One archive call on the archive thread; a disk error is logged and reads as
        "not there", so the Responses API degrades to memory instead of failing (with
        `raising`, logged and raised: a durable put's)."""
        try:
            result = call(*args)
        except Exception:  # NOTE: sqlite3 errors, a full disk, a read-only directory
            self.num_archive_failures += 1
            self._failures.log(operation, "stepahead: warning: the response archive failed to %s", operation)
            if raising:
                raise
            return None
        if self._held:   # the archive answered: perhaps the disk has room again
            self._write_held()
        return result

    def close(self) -> None:
        """Finish pending archive writes, close the file and give up this process's owner
        claim (its runs have ended: a graceful stop stored them `failed`)."""
        if self._archivist is not None:
            self._archivist.submit(self._write_held)
            self._archivist.submit(self.archive.close)
            self._archivist.submit(self._owners.release)
            self._archivist.shutdown(wait=True)
            self._archivist = None

    def __len__(self) -> int:
        """Responses held in memory."""
        return sum(len(entries) for entries in self._by_tenant.values())
