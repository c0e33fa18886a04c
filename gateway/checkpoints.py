"""Saving state now and then, so a crash loses minutes of learning (or seconds of
spending), not hours.

The gateway saves its forecasters' models and its tenants' spent tokens when it shuts
down; a process that is killed never gets there. `Checkpoints` calls the same save every
`every_s` seconds on its own thread, and once more when stopped.

Invariants: at most one save runs at a time (they all run on this one thread, the last
one after the thread has stopped); a save that raises is logged and the next tick tries
again; `stop` returns only after the final save has ended. A save the disk refuses (an
`OSError`: a directory that cannot be made or written, a full disk) is one warning line,
not a traceback (the reason is the operator's to fix, not a bug), and the same reason
again is counted, not logged, until a save works; any other error keeps its traceback.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cache.error_text import one_line_error

log = logging.getLogger("stepahead.gateway")


class Checkpoints:
    def __init__(self, save: Callable[[], object], every_s: float, name: str = "stepahead-checkpoints",
                 what: str = "the forecasters' state") -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be positive, got {every_s}")
        self._save = save
        self._what = what
        self.every_s = every_s
        self.num_saved = 0
        self.num_failed = 0
        self._last_refusal: str | None = None   # the disk's reason last logged, until a save works
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "Checkpoints":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopping.wait(self.every_s):
            self.save_now()

    def save_now(self) -> bool:
        """One save; False (and logged) if it raised."""
        try:
            self._save()
        except OSError as exc:
            self.num_failed += 1
            reason = one_line_error(exc)
            if reason != self._last_refusal:
                self._last_refusal = reason
                log.warning("stepahead: warning: could not save %s: %s", self._what, reason)
            return False
        except Exception:
            self.num_failed += 1
            log.exception("could not checkpoint %s", self._what)
            return False
        self.num_saved += 1
        self._last_refusal = None
        return True

    def stop(self) -> bool:
        """Stop the ticks, then save once more; whether that final save worked."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.save_now()
