"""The Conversations API's store: the archive's calls made on one thread of their own.

Invariants:
- the event loop never touches the file: every call runs on the store's one thread, in
  the order it was made, so a turn's items added when its response finished are there
  for the next turn's read, however soon it comes;
- a conversation or item that is not there is a 404 naming it (another tenant's ids
  read the same as unknown ones); an archive that fails (a full disk) is a 500 saying so,
  logged at most once a minute per operation;
- `append` (a finished response's items) is not awaited: a failure is logged, and a
  conversation deleted meanwhile takes nothing.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cache.repeated_failures import RepeatedFailures
from gateway.conversation_archive import ConversationArchive, Missing
from gateway.errors import ApiError, server_error

log = logging.getLogger("stepahead.gateway")


def not_found(missing: Missing) -> ApiError:
    what = "Conversation" if missing.what == "conversation" else "Item"
    param = "conversation_id" if missing.what == "conversation" else "item_id"
    return ApiError(404, f"{what} with id '{missing.name}' not found.", "invalid_request_error", "not_found", param)


class ConversationStore:
    def __init__(self, archive: ConversationArchive) -> None:
        self.archive = archive
        self._thread: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="stepahead-conversations")
        self._failures = RepeatedFailures(log)   # used on the store's thread only

    def _run(self, operation: str, *args: Any) -> Any:
        """On the store's thread: one archive call; Missing passes, other errors are logged."""
        try:
            return getattr(self.archive, operation)(*args)
        except Missing:
            raise
        except Exception:  # NOTE: sqlite3 errors, a full disk, a read-only directory
            self._failures.log(operation, "the conversation archive failed to %s", operation)
            raise

    async def call(self, operation: str, *args: Any) -> Any:
        """`archive.<operation>(*args)` on the store's thread; Missing is a 404, other
        failures a 500."""
        if self._thread is None:
            raise server_error("The conversation store is closed: the gateway is stopping.")
        try:
            return await asyncio.wrap_future(self._thread.submit(self._run, operation, *args))
        except Missing as missing:
            raise not_found(missing) from None
        except Exception as exc:
            raise server_error(f"The conversation store could not {operation.replace('_', ' ')}: "
                               f"{type(exc).__name__}: {exc}") from None

    def append(self, tenant: str, conversation_id: str, items: list[dict]) -> None:
        """Add a finished response's items, without waiting (see the invariants)."""
        if self._thread is not None and items:
            self._thread.submit(self._append_quietly, tenant, conversation_id, items)

    def _append_quietly(self, tenant: str, conversation_id: str, items: list[dict]) -> None:
        try:
            self._run("add_items", tenant, conversation_id, items)
        except Missing:
            log.info("conversation %s was deleted before its response's items were added", conversation_id)
        except Exception:
            pass   # logged by _run

    def close(self) -> None:
        """Finish pending calls and close the file."""
        if self._thread is not None:
            self._thread.submit(self.archive.close)
            self._thread.shutdown(wait=True)
            self._thread = None
