"""A store's own thread: the calls that touch its disk, made off the event loop, one at a
time, in the order made; and the directory a store keeps when it is given none.

Invariants: `call` runs on the one thread and returns its result on the event loop; an
`ApiError` passes as raised; a disk or database failure (`OSError`: a full disk, a
read-only directory; `sqlite3.Error`) is logged, at most once a minute per operation, and
becomes a 500 saying what failed; `submit` runs a call without waiting, its failures
logged the same way; once closed, a call is a 500 (the gateway is stopping) and `close`
has waited for every call made before it. A `TemporaryRoot` is made on first use and
removed by `remove()`.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cache.repeated_failures import RepeatedFailures
from gateway.errors import server_error

log = logging.getLogger("stepahead.gateway")
STORE_FAILURES = (OSError, sqlite3.Error)


def _operation(function: Callable[..., Any]) -> str:
    """What a call does, for messages: `_append_results` -> "append results"."""
    return getattr(function, "__name__", "call").strip("_").replace("_", " ")


class StoreThread:
    __slots__ = ("what", "_thread", "_failures")

    def __init__(self, name: str, what: str) -> None:
        self.what = what   # names the store in errors: "the file store"
        self._thread: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._failures = RepeatedFailures(log, expected=STORE_FAILURES)   # used on the thread only

    def _logged(self, operation: str, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except STORE_FAILURES:
            self._failures.log(operation, "stepahead: warning: %s failed to %s", self.what, operation)
            raise

    async def call(self, function: Callable[..., Any], *args: Any, named: str | None = None) -> Any:
        """`function(*args)` on the thread; `named` says what it does in messages (else
        the function's name)."""
        if self._thread is None:
            raise server_error(f"{self.what.capitalize()} is closed: the gateway is stopping.")
        operation = named or _operation(function)
        try:
            return await asyncio.wrap_future(self._thread.submit(self._logged, operation, function, *args))
        except STORE_FAILURES as exc:
            raise server_error(f"{self.what.capitalize()} could not {operation}: {type(exc).__name__}: {exc}") from None

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        """Run `function(*args)` on the thread without waiting (nothing once closed)."""
        if self._thread is not None:
            self._thread.submit(self._quietly, function, *args)

    def _quietly(self, function: Callable[..., Any], *args: Any) -> None:
        try:
            self._logged(_operation(function), function, *args)
        except STORE_FAILURES:
            pass   # logged

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
