"""SIGHUP held (blocked) while this process starts children, so a group's hang-up (a
terminal's, `kill -HUP -PGID`) cannot kill them before they ignore it: a child execs with
SIGHUP's default (fatal) action, whatever this process's handler, but keeps a blocked mask
(QA145: the resource tracker died at one hang-up, a fork server still starting at several).
A child that must outlive the group's signals (`ignore_group_signals`) ignores them, then
unblocks SIGHUP: one pending is discarded, and what it starts gets SIGHUP ignored.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager

GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # Ctrl+C, a stop, a hang-up


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


def ignore_group_signals() -> None:
    """In a child the gateway started (the fork server, a spawned worker, a child call):
    ignore what reaches the whole process group (the gateway decides what stops), then
    unblock SIGHUP, which it started with held (`hangups_held`)."""
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
