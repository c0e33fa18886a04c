"""Work for a request run in a worker thread that is told to stop once its client leaves.

Invariant: `while_client_stays` sets the `stop` event it hands `work` as soon as the
client's `http.disconnect` arrives, and stops watching when `work` ends, however it ends;
`work` decides how soon it looks at the event (a walk of the store: every batch of rows; a
query: every slice of SQLite instructions) and how it says it stopped (its own exception,
which `unless_client_leaves` answers with a 499).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

T = TypeVar("T")


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
    try:
        return await while_client_stays(request, work)
    except stopped:
        return Response(status_code=499)
