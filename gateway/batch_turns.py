"""A tenant's batches share its batch sending round-robin: at most `size` of their
requests are with the app at once (`[server] batch_concurrency`), and each freed turn goes
to the next batch, in turn, that has a request waiting.

Why (QA162 N1): each batch sent on its own, so a tenant's six batches had twelve requests
in the local engine at once, and the engine, which sees one tenant, serves the shortest
prefill first: the requests admitted before their shared prompt was cached waited 20-40 s
behind the later ones, holding both of their batches' places, and three batches finished
nothing while the others went on.

Invariants:
- at most `size` turns are held at once; a freed turn goes straight to a waiter (no
  newcomer takes it first), so a turn is free only while none waits;
- the batches with a request waiting are served in a ring: after a batch is handed a
  turn it goes to the back, so each of n busy batches gets one turn in every n, whatever
  its requests' speed (a batch with a slow request still sends its next ones);
- within one batch, its requests take turns in the order they asked;
- a batch given up (`drop`: cancelled) has its waiting requests answered False at once.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict, deque


class LineTurns:
    """One tenant's turns for its batches' requests."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.num_held = 0
        self._waiting: OrderedDict[str, deque[asyncio.Future]] = OrderedDict()   # by batch, in ring order

    def is_idle(self) -> bool:
        return self.num_held == 0 and not self._waiting

    async def take(self, batch_id: str) -> bool:
        """Wait for a turn; True once held (give it back with `give_back`), False when the
        batch was given up meanwhile."""
        if self.num_held < self.size and not self._waiting:
            self.num_held += 1
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(batch_id, deque()).append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.give_back()   # handed over just as it was cancelled
            else:
                self._forget(batch_id, waiter)
            raise

    def give_back(self) -> None:
        """A turn ends: the next batch in the ring with a request waiting takes it."""
        while self._waiting:
            batch_id, waiters = next(iter(self._waiting.items()))
            waiter = waiters.popleft()
            if waiters:
                self._waiting.move_to_end(batch_id)
            else:
                del self._waiting[batch_id]
            if not waiter.done():
                waiter.set_result(True)
                return
        self.num_held -= 1

    def drop(self, batch_id: str) -> None:
        """The batch's waiting requests take no turn (it was cancelled)."""
        for waiter in self._waiting.pop(batch_id, ()):
            if not waiter.done():
                waiter.set_result(False)

    def _forget(self, batch_id: str, waiter: asyncio.Future) -> None:
        waiters = self._waiting.get(batch_id)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiting[batch_id]
