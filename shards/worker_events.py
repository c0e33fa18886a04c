"""What the operator is told when workers start, when one stops and when it serves again.

A worker that crashed, was killed (the kernel's OOM killer, a stray `kill -9`) or went
silent is fenced and restarted by the engine without anyone asking; these lines are how
that shows in the gateway's log instead of only in `/health`'s `num_restarts`. Pure
formatting: the engine decides when (after its start: a worker lost during the start
fails the start with its own error) and hands the lines to `LocalEngine.on_worker_event`.
"""
from __future__ import annotations

import signal

from shards.supervisor import START_TIMEOUT_REASON, UNRESPONSIVE_REASON


STATUS_LOST_REASON = "exited (status unknown: its fork server was gone)"


def exit_reason(exitcode: int | None, *, fork_server_gone: bool = False) -> str:
    """How a worker process ended, from its exit code (None: still running, its pipe closed).
    `fork_server_gone`: the fork server the worker came from is gone, so its status could
    not be known (multiprocessing then reports 255 whatever the worker's end was; a code
    the server passed on before it went is still told as it is)."""
    if fork_server_gone and exitcode == 255:
        return STATUS_LOST_REASON
    if exitcode is None:
        return "closed its pipe"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return "exited" if exitcode == 0 else f"exited with status {exitcode}"


def fork_server_down_line(pid: int, how: str) -> str:
    """One line for the workers' fork server lost (`how`: `exit_reason`'s words, as for a
    worker): the workers serve on, but each later restart forks from a new server, which
    imports torch for seconds first; it is started at once, so that the next one need not."""
    return (f"the workers' fork server (pid {pid}) {how}; the workers serve on; starting a new one now "
            "(a worker that stops before it has imported torch restarts only once it has)")


def fence_words(reason: str, health_timeout_s: float) -> str:
    """A reason the supervisor fenced a worker for, as the operator reads it (the engine
    kills what it fences)."""
    if reason == UNRESPONSIVE_REASON:
        return f"unresponsive for {health_timeout_s:g} s, killed"
    if reason == START_TIMEOUT_REASON:
        return f"{reason}, killed"
    return reason


def worker_down_line(worker_id: str, reason: str, *, num_failed: int, num_retried: int,
                     restart_in_s: float, while_starting: bool, num_serving: int, num_resumed: int = 0) -> str:
    """One line for a worker fenced after the start: why, what became of its requests,
    and when it is restarted. `num_serving`: the model's other workers a request may be
    sent to now; with none, its requests wait for a worker to serve again (the line never
    says "another worker" then: QA199 F9)."""
    when = " while starting" if while_starting and START_TIMEOUT_REASON not in reason else ""
    line = f"worker {worker_id} {reason}{when}"
    outcomes = []
    if num_failed:
        outcomes.append(f"{num_failed} request(s) it was running failed")
    if num_retried:
        outcomes.append(f"{num_retried} not yet answered " + ("went to another worker" if num_serving
                                                              else "wait for a worker to serve again"))
    if num_resumed:
        outcomes.append(f"{num_resumed} request(s) cut mid-reply go on from their last token "
                        + ("on another worker" if num_serving else "when a worker serves again"))
    if outcomes:
        line += ": " + ", ".join(outcomes)
    return f"{line}; restarting it in {restart_in_s:.1f} s"


NOT_STORED = "no timing of this machine with these settings from the last 24 h"
REUSE_OFF = "reuse_probed_costs = false"
NOT_KEPT = "timings are kept for local workers only"


def probe_reason(*, reuse: bool, local: bool, stored: bool) -> str | None:
    """Why a start's workers time their prefill and decode (None: they do not, a timing
    stored by an earlier start with `reuse` on is used): the reuse turned off
    (`reuse_probed_costs = false`, whatever is stored), Ray workers (no timing is kept
    for them), or none stored for this machine and these settings."""
    if not reuse:
        return REUSE_OFF
    if not local:
        return NOT_KEPT
    return None if stored else NOT_STORED


def workers_starting_line(num_workers: int, *, probe: str | None) -> str:
    """One line as the workers of a start are spawned: they load the model, and when
    `probe` gives a reason (`probe_reason`), each also times its prefill and decode,
    seconds more, and the line says why."""
    line = f"starting {num_workers} worker(s): loading the model"
    if probe is not None:
        line += f", then timing each one's prefill and decode ({probe})"
    return line


def worker_back_line(worker_id: str, num_restarts: int, down_s: float) -> str:
    """One line for a restarted worker that is ready again."""
    return f"worker {worker_id} serves again (restart {num_restarts}, {down_s:.1f} s after it stopped)"
