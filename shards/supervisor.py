"""Worker supervision: health checks, fencing, restarts with backoff. Pure bookkeeping.

Each worker slot (a stable worker id) runs one *incarnation* at a time. States:
  starting --ready--> ready --(died | silent past health_timeout_s)--> fenced
  fenced --(restart delay passed)--> starting (next incarnation)
A worker that does not become ready within `start_timeout_s` is fenced too.

The engine owns the side effects: it asks `plan(now)` what to do (whom to ping, fence,
restart), does it, and reports back (`on_spawned`, `on_ready`, `on_heard`, `on_exit`).

Invariants:
- only `ready` workers are routable, and one silent for two ping intervals only while none
  is fresh (`routability`); a worker is fenced at most once per incarnation,
  and messages from an older incarnation are recognised as stale (`is_current`);
- restart delays double after each failed start (up to `max_restart_delay_s`) and
  reset once an incarnation becomes ready, so a crash loop cannot spin the CPU;
- an exited worker is fenced at once, but `settled` only `exit_settle_s` later: the engine
  sends its requests on then, when workers killed together have all been seen gone;
- a slot's `fence_reason` is why it was last fenced: a restart keeps it until the slot
  is fenced again (empty while it never was), so /health still says why after a restart;
- a slot's `start_error` is the error its last failed load reported (`on_start_failed`),
  kept across restarts until an incarnation becomes ready or is fenced for another cause
  (a crash while it loaded is no load error: QA114): while every slot has one, the model's
  workers `cannot_start` (requests are refused, not queued for nothing).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from shards.routability import Routability, quiet_after_s

WorkerState = Literal["starting", "ready", "fenced"]
START_TIMEOUT_REASON = "did not start in time"
UNRESPONSIVE_REASON = "unresponsive"
START_FAILED_REASON = "failed to start"


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    ping_interval_s: float = 0.5
    health_timeout_s: float = 30.0
    start_timeout_s: float = 300.0
    restart_delay_s: float = 0.2
    max_restart_delay_s: float = 30.0
    exit_settle_s: float = 0.2   # see `settled`; at most the first restart delay


@dataclass(slots=True)
class WorkerHealth:
    worker_id: str
    incarnation: int
    state: WorkerState
    spawned_s: float
    last_heard_s: float
    last_ping_s: float = 0.0
    fenced_s: float | None = None
    fence_reason: str = ""   # why the slot was last fenced, this incarnation or an earlier one
    num_restarts: int = 0
    num_failed_starts: int = 0
    round_trip_s: float | None = None
    start_error: str = ""   # the last failed load's error (WorkerFailed), until an incarnation is ready


@dataclass(slots=True)
class SupervisorPlan:
    ping: list[str] = field(default_factory=list)
    fence: list[tuple[str, str]] = field(default_factory=list)  # (worker id, reason)
    restart: list[str] = field(default_factory=list)


class Supervisor:
    def __init__(self, config: SupervisorConfig | None = None) -> None:
        self.config = config or SupervisorConfig()
        self._workers: dict[str, WorkerHealth] = {}

    def health(self, worker_id: str) -> WorkerHealth:
        return self._workers[worker_id]

    def workers(self) -> list[WorkerHealth]:
        return [self._workers[w] for w in sorted(self._workers)]

    def is_current(self, worker_id: str, incarnation: int) -> bool:
        health = self._workers.get(worker_id)
        return health is not None and health.incarnation == incarnation and health.state != "fenced"

    def is_ready(self, worker_id: str) -> bool:
        health = self._workers.get(worker_id)
        return health is not None and health.state == "ready"

    def ready_workers(self) -> list[str]:
        return [w.worker_id for w in self.workers() if w.state == "ready"]

    def is_responsive(self, worker_id: str, now_s: float) -> bool:
        """Ready and heard from within `health_timeout_s`: not a worker the next `plan`
        fences for its silence (nor one fenced already)."""
        health = self._workers.get(worker_id)
        return (health is not None and health.state == "ready"
                and now_s - health.last_heard_s <= self.config.health_timeout_s)

    def routability(self, worker_id: str, now_s: float) -> Routability:
        """NONE unless `is_responsive`; QUIET when silent past two ping intervals (it missed
        its last ping: maybe hung, its fence a tick or two away); else FRESH."""
        if not self.is_responsive(worker_id, now_s):
            return Routability.NONE
        config = self.config
        silent_s = now_s - self._workers[worker_id].last_heard_s
        quiet = silent_s > quiet_after_s(config.ping_interval_s, config.health_timeout_s)
        return Routability.QUIET if quiet else Routability.FRESH

    def settled(self, worker_id: str, now_s: float) -> bool:
        """Fenced at least `exit_settle_s` ago, or restarting since. NOTE: workers killed
        together (one signal, a node lost) are seen gone one at a time, as each reader thread
        reaches its pipe's end: a request sent on before they all have may go to one of them."""
        health = self._workers[worker_id]
        if health.state != "fenced":
            return health.state == "starting"
        return now_s - (health.fenced_s or now_s) >= self.config.exit_settle_s

    # --- reports from the engine -----------------------------------------------------
    def on_spawned(self, worker_id: str, incarnation: int, now_s: float) -> None:
        previous = self._workers.get(worker_id)
        health = WorkerHealth(worker_id, incarnation, "starting", now_s, now_s)
        if previous is not None:
            health.num_restarts = previous.num_restarts + 1
            health.num_failed_starts = previous.num_failed_starts
            health.fence_reason = previous.fence_reason
            health.start_error = previous.start_error
        self._workers[worker_id] = health

    def on_ready(self, worker_id: str, incarnation: int, now_s: float) -> bool:
        """The incarnation finished loading; False if it is stale (ignore it)."""
        if not self.is_current(worker_id, incarnation):
            return False
        health = self._workers[worker_id]
        health.state = "ready"
        health.last_heard_s = now_s
        health.num_failed_starts = 0
        health.start_error = ""
        return True

    def on_heard(self, worker_id: str, incarnation: int, now_s: float,
                 ping_sent_s: float | None = None) -> None:
        """Any message from the worker proves its loop runs; a Pong also times a round trip."""
        if not self.is_current(worker_id, incarnation):
            return
        health = self._workers[worker_id]
        health.last_heard_s = now_s
        if ping_sent_s is not None:
            sample = max(0.0, now_s - ping_sent_s)
            rtt = health.round_trip_s
            health.round_trip_s = sample if rtt is None else 0.8 * rtt + 0.2 * sample

    def on_exit(self, worker_id: str, incarnation: int, now_s: float, reason: str = "exited") -> bool:
        """The incarnation's process/actor is gone. True when this fences it now (the
        caller must fail its requests); False when it was stale or fenced already."""
        if not self.is_current(worker_id, incarnation):
            return False
        self.fence(worker_id, now_s, reason)
        return True

    def on_start_failed(self, worker_id: str, incarnation: int, now_s: float, error: str) -> bool:
        """The incarnation could not load (it said why: `error`, a WorkerFailed's message,
        and exits): fenced now, as "failed to start: <the error's first line>", a failed
        start (the restart delay doubles). True when this fences it; False when stale."""
        if not self.is_current(worker_id, incarnation):
            return False
        self.fence(worker_id, now_s, start_failed_reason(error))
        self._workers[worker_id].start_error = error
        return True

    def cannot_start(self) -> str | None:
        """Why no worker can serve, when every slot's last start failed to load and none
        became ready since (the first slot's fence reason, naming it); else None. A slot
        restarting after a crash, or still in its first start, is not one of them."""
        workers = self.workers()
        if not workers or not all(health.start_error for health in workers):
            return None
        return f"worker {workers[0].worker_id} {start_failed_reason(workers[0].start_error)}"

    def fence(self, worker_id: str, now_s: float, reason: str) -> None:
        health = self._workers[worker_id]
        if health.state == "starting":
            health.num_failed_starts += 1
            if reason == START_TIMEOUT_REASON and health.fence_reason:   # keeps why it restarts (a lost Ray node)
                reason = (health.fence_reason if health.fence_reason.startswith(START_TIMEOUT_REASON)
                          else f"{reason} (after: {health.fence_reason})")
        health.state = "fenced"
        health.fenced_s = now_s
        health.fence_reason = reason
        health.start_error = ""   # `on_start_failed` sets it again after this, for a failed load

    # --- what to do now ---------------------------------------------------------------
    def next_restart_s(self) -> float | None:
        """When the first fenced slot is due to be restarted (the clock `plan` is given);
        None when none is fenced."""
        due = [health.fenced_s + self.restart_delay_s(health.worker_id) for health in self.workers()
               if health.state == "fenced" and health.fenced_s is not None]
        return min(due, default=None)

    def restart_delay_s(self, worker_id: str) -> float:
        health = self._workers[worker_id]
        delay = self.config.restart_delay_s * (2 ** min(health.num_failed_starts, 16))
        return min(delay, self.config.max_restart_delay_s)

    def plan(self, now_s: float) -> SupervisorPlan:
        """Whom to ping, fence and restart now. Marks pings as sent; fencing and
        restarting are reported back by the engine (`fence`, `on_spawned`)."""
        config = self.config
        plan = SupervisorPlan()
        for health in self.workers():
            if health.state == "ready":
                if now_s - health.last_heard_s > config.health_timeout_s:
                    plan.fence.append((health.worker_id, UNRESPONSIVE_REASON))
                elif now_s - health.last_ping_s >= config.ping_interval_s:
                    health.last_ping_s = now_s
                    plan.ping.append(health.worker_id)
            elif health.state == "starting":
                if now_s - health.spawned_s > config.start_timeout_s:
                    plan.fence.append((health.worker_id, START_TIMEOUT_REASON))
            elif now_s - (health.fenced_s or now_s) >= self.restart_delay_s(health.worker_id):
                plan.restart.append(health.worker_id)
        return plan


def start_failed_reason(error: str) -> str:
    """A failed load's fence reason: "failed to start: " and the first line of its error
    (a traceback's last line is in the worker's stderr; the whole error in the log)."""
    lines = error.strip().splitlines()
    return f"{START_FAILED_REASON}: {lines[0] if lines else 'no reason given'}"
