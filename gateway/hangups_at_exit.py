"""SIGHUP once the gateway is stopping: never the end of the process.

A SIGHUP reloads the tenants while the gateway serves (reload.py); while it stops, the
app logs HANGUP_WHILE_STOPPING (app.py), and once `serve` returned, until the process
exits, `HangupsWhileExiting` writes that same line: SIGHUP's default action would end
the stop with status 129 (QA64), the workers, the fork server and `atexit` still to go.

Invariant: from `install` on, no SIGHUP ends this process.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys

HANGUP_WHILE_STOPPING = "stepahead: SIGHUP ignored: the gateway is stopping"


class HangupsWhileExiting:
    """SIGHUP's handler once `serve` returned, until the process exits: the stop goes on
    after it (the workers and the fork server end, threads join, `atexit` runs: a second
    or more), and SIGHUP's default action would end it with status 129. Each SIGHUP
    writes the line the app logs for one while it stops (one `write`: safe in a handler
    that may interrupt any other write). At `atexit` SIGHUP becomes ignored outright, since
    the interpreter puts back the default action of every Python handler as it exits.
    From there no line is written: after the exit handlers the interpreter runs no Python
    code (no handler could write one), yet its final garbage collection and teardown can
    take a second or two with a model's libraries loaded (QA157: 1.5 s of a 1.7 s stop), so
    a SIGHUP then is ignored silently; the exit status is never changed."""

    def __call__(self, signum, frame) -> None:
        say_hangup_ignored()

    def install(self) -> None:
        signal.signal(signal.SIGHUP, self)
        atexit.unregister(ignore_hangups)   # one, whatever number of `serve` a process ran
        atexit.register(ignore_hangups)


def say_hangup_ignored() -> None:
    try:
        os.write(sys.stderr.fileno(), (HANGUP_WHILE_STOPPING + "\n").encode())
    except (OSError, ValueError, AttributeError):   # no stderr to tell
        pass


def ignore_hangups() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
