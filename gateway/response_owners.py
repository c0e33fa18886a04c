"""Which process runs an unfinished background response archived by a response store.

Each store names its process in the rows of its unfinished runs (`owner`: "<pid>-<random>")
and holds a claim (an advisory lock, `gateway.directory_claim`) on
`<archive>.owners/<owner>.lock` from before its first such row until `release`; the claim
dies with the process. Invariants: a row never names an owner not yet claimed (`claim` is
called before the row is written); an owner found gone stays gone (its lock file is
removed then, while held, as a finished batch's claim is); used on the store's archive
thread only (no locking here).
"""
from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from cache.private_paths import make_private_dirs
from gateway.directory_claim import DirectoryClaim, claim_lock_file

OWNER_NAME = re.compile(r"[0-9]+-[0-9a-f]{16}")   # "<pid>-<random>": unique per process, safe in a path


class ResponseOwners:
    def __init__(self, archive_path: Path | None) -> None:
        """`archive_path`: the archive's file (None: a file in memory, which no other process reads)."""
        self.archive_path = archive_path
        self.owner = f"{os.getpid()}-{secrets.token_hex(8)}"   # names this process in its unfinished rows
        self._claim: DirectoryClaim | None = None   # taken at the first unfinished row
        self._gone: set[str] = set()   # a gone owner never comes back

    def _directory(self) -> Path:
        return self.archive_path.with_name(self.archive_path.name + ".owners")

    def claim(self) -> None:
        """Hold this process's claim (idempotent)."""
        if self._claim is not None or self.archive_path is None:
            return
        directory = self._directory()
        make_private_dirs(directory)
        claim = claim_lock_file(directory / f"{self.owner}.lock")
        if not claim.held:   # NOTE: the name is this process's own; only a bug or a hand edit gets here
            raise RuntimeError(f"the response owner claim {self.owner} is held by process {claim.holder_pid}")
        self._claim = claim

    def lives(self, owner) -> bool:
        """Whether the process named `owner` still runs (its claim is held); one found
        gone has its lock file removed."""
        if owner == self.owner:
            return True   # this process: its runs answer from memory
        if owner in self._gone or not isinstance(owner, str) or not OWNER_NAME.fullmatch(owner) \
                or self.archive_path is None:
            return False
        lock_path = self._directory() / f"{owner}.lock"
        if lock_path.exists():
            claim = claim_lock_file(lock_path)
            if not claim.held:
                return True
            lock_path.unlink(missing_ok=True)   # while held, as a finished batch's claim is removed
            claim.release()
        self._gone.add(owner)
        return False

    def release(self) -> None:
        """Give this process's claim up (its runs have ended) and remove its lock file."""
        if self._claim is not None:
            (self._directory() / f"{self.owner}.lock").unlink(missing_ok=True)
            self._claim.release()
            self._claim = None
