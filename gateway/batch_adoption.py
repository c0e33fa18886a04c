"""Taking up batches no process runs (a mixin of `BatchRunner`, gateway/batch_runner.py,
whose invariants these keep): at the start, those a stopped gateway left unfinished, and
then every `ADOPT_EVERY_S` those another gateway sharing the state directory left (it
stopped or died), or cancelled, or ended (gateway/batch_claims.py); and, every
`CANCEL_LOOK_S` in between, the cancels another gateway made of the batches running here.

Invariants: each look launches every unfinished batch not running here (its claim taken
then, or not at all when another process holds it: it runs there); a batch running here
that another gateway cancelled (its record `cancelling` in the store) stops sending as soon
as this one sees it: at its next result kept, a retrieve here, its end, or within
`CANCEL_LOOK_S` (QA231 F1: it was 30 s, and a batch that ended first ended `completed`);
from then on it is `cancelling` here too, with the cancel's `cancelling_at`, and ends
`cancelled`; a batch waiting here without its claim that another gateway ended is
dropped; a failing look (the store on a full disk) is logged and tried again at the next
period, never ending the looking (a failing look for cancels is left to the next one).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.batch_claims import ADOPT_EVERY_S
from gateway.batch_store import UNFINISHED, Batch

log = logging.getLogger("stepahead.gateway")


class BatchAdoption:
    """Uses `BatchRunner`'s `store`, `claims`, `clock`, `cancel_look_s`, `_app`, `_adopter`,
    `_tasks`, `_running`, `_cancelled`, `_launch` and `_stop_sending`."""

    __slots__ = ()

    async def start(self, app) -> None:
        """Go on with the batches a stopped gateway left unfinished, and from then on with
        those another gateway sharing the directory leaves (it stopped or died)."""
        self._app = app
        await self._adopt()
        self._adopter = asyncio.get_running_loop().create_task(self._adopt_every(ADOPT_EVERY_S))

    async def _adopt_every(self, period_s: float) -> None:
        loop = asyncio.get_running_loop()
        adopted_s = loop.time()
        while True:
            await asyncio.sleep(min(self.cancel_look_s, period_s))
            with contextlib.suppress(Exception):   # (the store failing: the full look below logs it)
                await self._look_for_cancels()
            if loop.time() - adopted_s < period_s:
                continue
            adopted_s = loop.time()
            try:
                await self._adopt()
            except Exception:   # NOTE: the store failing (a full disk) must not end the looking
                log.exception("looking for batches to go on failed; trying again in %.0f s", period_s)

    async def _look_for_cancels(self) -> None:
        """Read the record of each batch running here that this gateway did not cancel: one
        that another gateway cancelled stops here (`_cancelled_elsewhere`)."""
        for batch_id, running in list(self._running.items()):
            if batch_id not in self._cancelled:
                with contextlib.suppress(Exception):   # (its record gone or unreadable: not this look's to tell)
                    self._cancelled_elsewhere(await self.store.get(running.tenant, batch_id))

    def _cancelled_elsewhere(self, kept: Batch | None) -> None:
        """When `kept`, the store's record of a batch running here, is `cancelling` and this
        gateway did not cancel it (a gateway sharing the store did): stop sending its requests
        now, and answer it `cancelling` with the cancel's `cancelling_at` (the time the cancel
        answered); it ends `cancelled` (`BatchRunner._finish`, and the store: `batch_overwrite.KEPT_OVER`)."""
        running = None if kept is None else self._running.get(kept.id)
        if running is None or kept.status != "cancelling" or kept.id in self._cancelled \
                or running.status not in UNFINISHED:
            return
        running.status = "cancelling"
        running.times.pop("finalizing_at", None)
        if "cancelling_at" in kept.times:
            running.times["cancelling_at"] = kept.times["cancelling_at"]
        else:
            running.moved_to("cancelling", self.clock())
        self._stop_sending(kept.id)

    async def _adopt(self) -> None:
        """Run the unfinished batches no process runs; stop here the ones this process runs
        that another gateway cancelled, and drop the waits (without a claim) of those ended."""
        unfinished = await self.store.unfinished()
        for batch in unfinished:
            if batch.id not in self._tasks:
                self._launch(batch)
            else:
                self._cancelled_elsewhere(batch)
        going_on = {batch.id for batch in unfinished}
        for batch_id, task in list(self._tasks.items()):
            if batch_id not in going_on and not self.claims.holds(batch_id):   # another gateway ended it
                task.cancel()
