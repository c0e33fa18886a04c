"""Stopping a background fit early, and keeping it out of hmmlearn's native code at exit.

Why: hmmlearn's EM runs in C++ (`_hmmc`, pybind11) with the GIL released. A daemon thread
still in there when the interpreter finalizes is ended (pthread_exit) as it takes the GIL
back inside a C++ destructor, which aborts the whole process (`terminate called without
an active exception`, exit status 134) after an otherwise clean stop (QA192 F1).

`FitStop` is one worker's stop request plus a gate around native EM. The worker runs each
job under `stoppable_by(stop)`; `hmm.run_em` enters EM only through `stop.native()`, and
its convergence monitor calls `stop.check()`, which raises `FitStopped`, between two EM
iterations. Invariant: after `request()`, once `wait_native_idle` returns True no
fit of that worker is inside native EM, and none enters it again (`native()` raises
`FitStopped` at its door). A fit outside `stoppable_by` (synchronous refits of tools and
tests) is never stopped. The context variable is per thread (a thread starts with an
empty context), so one worker's stop never reaches another thread's fit.
"""
from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from typing import Iterator


class FitStopped(Exception):
    """A fit gave up because its worker was asked to stop; its result is nobody's."""


class FitStop:
    """One worker's stop request and its gate around native EM (see the module)."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._native = threading.Lock()   # held while a fit is inside hmmlearn's EM

    def request(self) -> None:
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def check(self) -> None:
        """Raise FitStopped once the stop is requested."""
        if self._requested.is_set():
            raise FitStopped

    @contextlib.contextmanager
    def native(self) -> Iterator[None]:
        """Held around native EM; refuses entry (FitStopped) once the stop is requested."""
        with self._native:
            self.check()
            yield

    def wait_native_idle(self, timeout_s: float | None) -> bool:
        """After `request()`: wait until no fit is inside native EM (at most `timeout_s`);
        True when none is, and then none will enter it again."""
        if not self._native.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s)):
            return False
        self._native.release()
        return True


_CURRENT: ContextVar[FitStop | None] = ContextVar("stepahead_fit_stop", default=None)


@contextlib.contextmanager
def stoppable_by(stop: FitStop) -> Iterator[None]:
    """Fits run in this block (on this thread) stop when `stop` is requested."""
    token = _CURRENT.set(stop)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_stop() -> FitStop | None:
    """The stop of the fit running on this thread, or None (never stopped)."""
    return _CURRENT.get()
