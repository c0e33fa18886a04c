"""A batch's waits before it runs here (a mixin of `BatchRunner`, gateway/batch_runner.py,
whose invariants these keep): for its tenant to be configured, and, not yet started, for
one of its tenant's running places (gateway/batch_places.py).

Invariants: neither wait outlives a cancel of the batch (nor the window, for the tenant's);
a batch that waited for its place is `in_progress` (kept so) before any request is sent,
and a cancelled one is never moved back to `in_progress`, nor one placed once the
gateway's stop began (it waits again at the next start).
"""
from __future__ import annotations

import logging

from gateway.batch_store import Batch

log = logging.getLogger("stepahead.gateway")
TENANT_POLL_S = 1.0   # how often a batch whose tenant is not configured looks again


class BatchWaits:
    """Uses `BatchRunner`'s `keys`, `claims`, `places`, `store`, `clock`, `is_stopping`,
    `_cancelled`, `_cancelled_elsewhere` and `_wait_unless_cancelled`."""

    __slots__ = ()

    async def _claim_to_go_on(self, batch: Batch) -> bool:
        """Wait, holding no claim, while the batch's tenant is not configured here (a reload
        removed it, or the gateway started without it) and it is neither cancelled nor
        expired; then take its claim. False when another process holds it: it runs there."""
        def waits() -> bool:
            return not self.keys().has_tenant(batch.tenant) and batch.id not in self._cancelled \
                and self.clock() < batch.expires_at and not self.is_stopping
        waited = waits()
        if waited:
            log.warning("batch %s waits: its tenant %r is not in the config; a gateway sharing this directory that "
                        "has it can run it meanwhile, and it goes on here when the tenant is back (or ends when it "
                        "expires or is cancelled)", batch.id, batch.tenant)
        while waits():
            await self._wait_unless_cancelled(batch.id, min(TENANT_POLL_S, max(0.0, batch.expires_at - self.clock())))
        if self.is_stopping or not self.claims.take(batch.id):
            return False
        if waited and self.keys().has_tenant(batch.tenant):
            log.info("batch %s goes on: its tenant %r is back", batch.id, batch.tenant)
        return True

    async def _start_when_placed(self, batch: Batch) -> bool:
        """A batch not yet started (`validating`) waits for a place among its tenant's
        running batches, then starts; a cancel meanwhile ends the wait (it is `cancelling`).
        False when the gateway's stop began meanwhile: it stays `validating`, its place given
        back (QA166: the places the stopping batches left started the waiting ones, so the
        next start ran them all, past the cap), and waits again at the next start."""
        if batch.status != "validating":
            return True
        placed = await self.places.wait(batch.tenant, batch.id)
        if placed and self.is_stopping:
            self.places.release(batch.tenant, batch.id)
            return False
        if placed and batch.id not in self._cancelled:
            batch.moved_to("in_progress", self.clock())
            # (kept `cancelling` where another gateway cancelled it meanwhile: it stops then)
            self._cancelled_elsewhere(await self.store.put(batch))
        return True
