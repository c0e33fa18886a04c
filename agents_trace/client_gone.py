"""Work for a request run in a worker thread that is told to stop once its client leaves.

Invariant: `while_client_stays` sets the `stop` event it hands `work` as soon as the
client's `http.disconnect` arrives, and stops watching when `work` ends, however it ends;
`work` decides how soon it looks at the event (a walk of the store: every batch of rows; a
query: every slice of SQLite instructions) and how it says it stopped (its own exception,
which `unless_client_leaves` answers with a 499). That 499 reaches nobody, and uvicorn
writes no access line for a client gone, so `unless_client_leaves` logs one line for it
(`log_client_left`): the access line's shape and level (its filters applied to it: the
query's secrets redacted, gateway/access_log.py), with how long the read ran; only where
access lines are written at all, and one per request at most.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

T = TypeVar("T")
CLIENT_CLOSED_STATUS = 499   # nginx's "client closed request"
ACCESS_LOGGER = "uvicorn.access"   # uvicorn's access lines (the gateway's redaction filter is on it)
SERVER_LOGGER = "uvicorn.error"    # uvicorn's own lines: "INFO:     " and the message, at --log-level
ACCESS_LINE = '%s - "%s %s HTTP/%s" %d'   # uvicorn's access line: client, method, path, version, status


async def while_client_stays(request: Request, work: Callable[[threading.Event], T]) -> T:
    """`work(stop)` in the threadpool, `stop` set once the client has gone (a closed tab, a
    fetch given up); what `work` returns or raises."""
    stop = threading.Event()

    async def until_client_leaves() -> None:   # the body's message (none for a GET), then the disconnect
        while (await request.receive())["type"] != "http.disconnect":
            pass
        stop.set()

    failed: BaseException | None = None
    async with anyio.create_task_group() as watching:
        watching.start_soon(until_client_leaves)
        try:
            done = await run_in_threadpool(work, stop)
        except Exception as error:   # raised after the group: inside it, it would come out as an ExceptionGroup
            failed = error
        finally:
            watching.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return done


async def unless_client_leaves(request: Request, work: Callable[[threading.Event], T],
                               stopped: tuple[type[Exception], ...]) -> T | Response:
    """`while_client_stays`, answered with a 499 (nginx's "client closed request", which
    nobody receives), never a 500, when `work` raised one of `stopped`: it stopped because
    its client left."""
    started_s = time.perf_counter()
    try:
        return await while_client_stays(request, work)
    except stopped:
        log_client_left(request.scope, time.perf_counter() - started_s)
        return Response(status_code=CLIENT_CLOSED_STATUS)


def log_client_left(scope: dict, read_s: float) -> None:
    """One INFO line for a request whose client left during its read: the access line
    uvicorn would have written for its 499 (client address, method, path and query as
    uvicorn gives them, after the access logger's own filters: a credential in the query
    redacted), then that the client left and after how long the read stopped; no tenant.
    Written where access lines are (`--log-level` info or lower, an access handler: none
    under `--no-access-log`), through uvicorn's server log (the access formatter takes no
    words of ours)."""
    access = logging.getLogger(ACCESS_LOGGER)
    if not (access.isEnabledFor(logging.INFO) and access.hasHandlers()):
        return
    client = scope.get("client")
    path = (scope.get("raw_path") or scope.get("path", "").encode()).decode("latin1")
    query = scope.get("query_string") or b""
    if query:
        path = f"{path}?{query.decode('ascii', 'backslashreplace')}"
    record = access.makeRecord(ACCESS_LOGGER, logging.INFO, __file__, 0, ACCESS_LINE,
                               (":".join(map(str, client)) if client else "", scope.get("method", ""),
                                path.replace('"', "%22"), scope.get("http_version", "1.1"), CLIENT_CLOSED_STATUS),
                               None)
    if access.filter(record):
        logging.getLogger(SERVER_LOGGER).info("%s (the client left; its read stopped after %.2f s)",
                                              record.getMessage(), read_s)
