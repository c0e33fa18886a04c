"""What this process's exit waits for: never a child whose status cannot come.

multiprocessing's exit hook joins, with no timeout, every child it still tracks
(`multiprocessing.process._children`). A child forked from the fork server gets its status
from that server only, which never sends it while stopped (SIGSTOP, a frozen cgroup): a
gateway holding such a child said "Finished server process" and never exited (QA140 H1).
"""
from __future__ import annotations


def not_joined_at_exit(process) -> None:
    """Take `process` out of what the exit hook joins: a worker or a child call whose pipe
    closed, or that was SIGKILLed, and whose status has still not come. It is gone or
    going; its fork server reaps it."""
    from multiprocessing import process as processes

    processes._children.discard(process)
