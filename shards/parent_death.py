"""A process that ends when the process that started it is gone, even killed outright.

The workers' fork server imports torch for seconds before it serves, and only then notices
that its gateway went away (multiprocessing's "alive" pipe): a gateway SIGKILLed during its
start left it running 20-30 s with a core and 320 MB (QA95). Linux's parent-death signal
(`prctl(PR_SET_PDEATHSIG)`) ends it at once instead.

NOTE (prctl(2)): the "parent" is the *thread* that forked the process, and the signal is
sent each time that thread exits, also while the rest of its process runs on (the child
is then handed to another of its threads). The fork server is restarted from whatever
thread spawns a worker or watches the server (shards/fork_server_watch.py), some of them
short-lived, so the signal is not SIGKILL: it is a handled one, whose handler ends the
process only once its parent *process* is gone (`os.getppid()` is no longer the one it
started under). The setting is cleared in a forked child, so the workers the server forks
never get it; a forked child keeps the handler, which gives such a signal its default
action there.

Invariant: after `die_with_parent()` returned True, this process ends within one signal
delivery of its parent process's end (the handler runs between two bytecodes of its main
thread: a long C call, such as loading one shared library, delays it by that call).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1   # <linux/prctl.h>
PARENT_DEATH_SIGNAL = signal.SIGUSR1


def die_with_parent(signum: int = PARENT_DEATH_SIGNAL) -> bool:
    """Make this process exit (status 0) when its parent process ends; whether the
    parent-death signal could be set (False off Linux: nothing is changed there). If the
    parent is gone already, exits at once."""
    if not sys.platform.startswith("linux"):
        return False
    parent, me = os.getppid(), os.getpid()

    def on_parent_death(received: int, _frame) -> None:
        if os.getpid() != me:   # a process forked from this one: the signal's default action
            signal.signal(received, signal.SIG_DFL)
            os.kill(os.getpid(), received)
            return
        if os.getppid() != parent:   # not a thread of the parent that ended: the parent itself
            os._exit(0)

    signal.signal(signum, on_parent_death)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:   # it ended before the prctl took effect
        os._exit(0)
    return True
