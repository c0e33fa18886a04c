"""Which process runs a batch, when gateways share a state directory (two `stepahead
serve` on one host with the same data directory, or a restart that overlaps the old
process).

Invariants:
- a batch runs in at most one process at a time: its runner holds the batch's claim (an
  advisory lock on `<claims>/<batch id>.lock`, `gateway.directory_claim`) from before it
  sends a request until it stops running it;
- a process holds no claim on a batch whose tenant it lacks (BatchRunner takes it only
  with the tenant configured, or to end the batch cancelled or expired, and lets it go
  while a reload removed the tenant), so a gateway that has the tenant can run it;
- a claim dies with its process, so the batches of a gateway that stopped or died can
  be taken up by another (BatchRunner looks every `ADOPT_EVERY_S`);
- a batch held by another process is logged once per batch, naming that process;
- the lock file of a finished batch is removed while its claim is still held.
"""
from __future__ import annotations

import logging
from pathlib import Path

from cache.private_paths import make_private_dirs
from gateway.directory_claim import DirectoryClaim, claim_lock_file

log = logging.getLogger("stepahead.gateway")
ADOPT_EVERY_S = 30.0   # how often a runner looks for unfinished batches no process runs
CANCEL_LOOK_S = 1.0   # how often it reads the records of those it runs, for a cancel another gateway made


class BatchClaims:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._held: dict[str, DirectoryClaim] = {}
        self._logged: set[str] = set()   # batches found held elsewhere, logged once

    def take(self, batch_id: str) -> bool:
        """True when this process holds (or now takes) the batch's claim."""
        if batch_id in self._held:
            return True
        make_private_dirs(self.directory)   # (its lock files: private_opener, directory_claim)
        claim = claim_lock_file(self.directory / f"{batch_id}.lock")
        if not claim.held:
            if batch_id not in self._logged:
                self._logged.add(batch_id)
                holder = f"process {claim.holder_pid}" if claim.holder_pid else "another process"
                log.info("batch %s runs in %s (a gateway sharing %s); not here", batch_id, holder, self.directory)
            return False
        self._held[batch_id] = claim
        self._logged.discard(batch_id)
        return True

    def holds(self, batch_id: str) -> bool:
        """Whether this process holds the batch's claim now."""
        return batch_id in self._held

    def release(self, batch_id: str, *, finished: bool) -> None:
        """Give the batch up; a `finished` one's lock file is removed first."""
        claim = self._held.pop(batch_id, None)
        if claim is None:
            return
        if finished:
            (self.directory / f"{batch_id}.lock").unlink(missing_ok=True)
        claim.release()
