"""Taking up batches no process runs (a mixin of `BatchRunner`, gateway/batch_runner.py,
whose invariants these keep): at the start, those a stopped gateway left unfinished, and
then every `ADOPT_EVERY_S` those another gateway sharing the state directory left (it
stopped or died), or cancelled, or ended (gateway/batch_claims.py).

Invariants: each look launches every unfinished batch not running here (its claim taken
then, or not at all when another process holds it: it runs there); a batch running here
that another gateway cancelled stops sending at once; a batch waiting here without its
claim that another gateway ended is dropped; a failing look (the store on a full disk) is
logged and tried again at the next period, never ending the looking.
"""
from __future__ import annotations

import asyncio
import logging

from gateway.batch_claims import ADOPT_EVERY_S

log = logging.getLogger("stepahead.gateway")


class BatchAdoption:
    """Uses `BatchRunner`'s `store`, `claims`, `clock`, `_app`, `_adopter`, `_tasks`,
    `_running`, `_cancelled`, `_launch` and `_stop_sending`."""

    __slots__ = ()

    async def start(self, app) -> None:
        """Go on with the batches a stopped gateway left unfinished, and from then on with
        those another gateway sharing the directory leaves (it stopped or died)."""
        self._app = app
        await self._adopt()
        self._adopter = asyncio.get_running_loop().create_task(self._adopt_every(ADOPT_EVERY_S))

    async def _adopt_every(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await self._adopt()
            except Exception:   # NOTE: the store failing (a full disk) must not end the looking
                log.exception("looking for batches to go on failed; trying again in %.0f s", period_s)

    async def _adopt(self) -> None:
        """Run the unfinished batches no process runs; stop here the ones this process runs
        that another gateway cancelled, and drop the waits (without a claim) of those ended."""
        unfinished = await self.store.unfinished()
        for batch in unfinished:
            if batch.id not in self._tasks:
                self._launch(batch)
            elif batch.status == "cancelling" and batch.id not in self._cancelled:
                self._running[batch.id].moved_to("cancelling", self.clock())
                self._stop_sending(batch.id)
        going_on = {batch.id for batch in unfinished}
        for batch_id, task in list(self._tasks.items()):
            if batch_id not in going_on and not self.claims.holds(batch_id):   # another gateway ended it
                task.cancel()
