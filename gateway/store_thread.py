"""A store's own thread: the calls that touch its disk, made off the event loop, one at a
time, in the order made; and the directory a store keeps when it is given none.

Invariants: `call` runs on the one thread and returns its result on the event loop; an
`ApiError` passes as raised, an `OSError` (a full disk, a read-only directory) becomes a
500 saying what failed; once closed, a call is a 500 (the gateway is stopping) and
`close` has waited for every call made before it. A `TemporaryRoot` is made on first use
and removed by `remove()`.
"""
from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.errors import ApiError, server_error


class StoreThread:
    __slots__ = ("what", "_thread")

    def __init__(self, name: str, what: str) -> None:
        self.what = what   # names the store in errors: "the file store"
        self._thread: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        if self._thread is None:
            raise server_error(f"{self.what.capitalize()} is closed: the gateway is stopping.")
        try:
            return await asyncio.wrap_future(self._thread.submit(function, *args))
        except ApiError:
            raise
        except OSError as exc:
            raise server_error(f"{self.what.capitalize()} could not do that: {type(exc).__name__}: {exc}") from None

    def close(self, last: Callable[[], object] | None = None) -> None:
        """Wait for the calls made so far, then `last()` on the thread (closing a file)."""
        if self._thread is not None:
            if last is not None:
                self._thread.submit(last)
            self._thread.shutdown(wait=True)
            self._thread = None


class TemporaryRoot:
    """A directory made on first use (`path`), removed by `remove()`."""

    __slots__ = ("prefix", "_path")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = Path(tempfile.mkdtemp(prefix=self.prefix))
        return self._path

    def remove(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None
