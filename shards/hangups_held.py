"""SIGHUP held (blocked) while this process starts children, so a group's hang-up (a
terminal's, `kill -HUP -PGID`) cannot kill them before they ignore it: a child execs with
SIGHUP's default (fatal) action, whatever this process's handler, but keeps a blocked mask
(QA145: the resource tracker died at one hang-up, a fork server still starting at several).
"""
from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def hangups_held():
    """SIGHUP blocked in the calling thread meanwhile, then unblocked unless it was blocked
    before. A process started meanwhile starts with it blocked, which exec keeps, until
    it ignores it: the fork server at its first import (shards/fork_server_signals.py), a
    spawned worker in `_process_main`; the resource tracker keeps it blocked for good.
    Invariant: no SIGHUP is lost; one that comes meanwhile goes to another thread, or to
    this one once unblocked (`HangupsBeforeStart` counts it, the app reloads)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        if signal.SIGHUP not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
