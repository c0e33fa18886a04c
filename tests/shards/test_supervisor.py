"""Supervision as bookkeeping: pings, fencing the silent, restarts with backoff."""
from __future__ import annotations

from shards.supervisor import Supervisor, SupervisorConfig


def _ready(supervisor, worker="w0", incarnation=0, now=0.0):
    supervisor.on_spawned(worker, incarnation, now)
    assert supervisor.on_ready(worker, incarnation, now)


def test_supervisor_pings_ready_workers_once_per_interval():
    supervisor = Supervisor(SupervisorConfig(ping_interval_s=1.0))
    _ready(supervisor)
    assert supervisor.plan(1.0).ping == ["w0"]
    assert supervisor.plan(1.5).ping == []
    assert supervisor.plan(2.1).ping == ["w0"]


def test_supervisor_fences_a_worker_silent_past_the_health_timeout():
    supervisor = Supervisor(SupervisorConfig(ping_interval_s=0.5, health_timeout_s=2.0))
    _ready(supervisor)
    supervisor.on_heard("w0", 0, 1.5)
    assert supervisor.plan(3.0).fence == []
    assert supervisor.plan(3.6).fence == [("w0", "unresponsive")]
    supervisor.fence("w0", 3.6, "unresponsive")
    assert not supervisor.is_ready("w0") and supervisor.ready_workers() == []


def test_supervisor_restart_delay_doubles_after_failed_starts_and_resets_when_ready():
    supervisor = Supervisor(SupervisorConfig(restart_delay_s=1.0, max_restart_delay_s=3.0))
    _ready(supervisor)
    assert supervisor.on_exit("w0", 0, 10.0)
    assert supervisor.restart_delay_s("w0") == 1.0
    assert supervisor.plan(10.5).restart == [] and supervisor.plan(11.0).restart == ["w0"]
    supervisor.on_spawned("w0", 1, 11.0)
    supervisor.on_exit("w0", 1, 12.0)  # died while starting
    assert supervisor.restart_delay_s("w0") == 2.0
    supervisor.on_spawned("w0", 2, 14.0)
    supervisor.on_exit("w0", 2, 15.0)
    assert supervisor.restart_delay_s("w0") == 3.0  # capped
    _ready(supervisor, incarnation=3, now=20.0)
    assert supervisor.health("w0").num_restarts == 3
    supervisor.on_exit("w0", 3, 30.0)
    assert supervisor.restart_delay_s("w0") == 1.0


def test_supervisor_ignores_a_stale_incarnation():
    supervisor = Supervisor()
    _ready(supervisor)
    assert supervisor.on_exit("w0", 0, 1.0)
    assert not supervisor.on_exit("w0", 0, 1.1)  # fenced once only
    supervisor.on_spawned("w0", 1, 2.0)
    assert not supervisor.on_ready("w0", 0, 2.5)
    assert not supervisor.on_exit("w0", 0, 2.6)
    assert supervisor.is_current("w0", 1) and not supervisor.is_current("w0", 0)


def test_supervisor_fences_a_worker_that_never_becomes_ready():
    supervisor = Supervisor(SupervisorConfig(start_timeout_s=5.0))
    supervisor.on_spawned("w0", 0, 0.0)
    assert supervisor.plan(4.0).fence == []
    assert supervisor.plan(6.0).fence == [("w0", "did not start in time")]


def test_a_restart_that_never_starts_keeps_why_the_worker_was_lost():
    """QA96: a Ray actor lost with its node restarts into nothing; after the start timeout
    its fence_reason said only "did not start in time", losing the cause."""
    supervisor = Supervisor(SupervisorConfig(start_timeout_s=5.0))
    _ready(supervisor)
    supervisor.fence("w0", 1.0, "lost its Ray actor (ActorDiedError; its node 10.0.0.1 is gone)")
    supervisor.on_spawned("w0", 1, 2.0)
    [(worker, reason)] = supervisor.plan(8.0).fence
    supervisor.fence(worker, 8.0, reason)
    assert supervisor.health("w0").fence_reason == (
        "did not start in time (after: lost its Ray actor (ActorDiedError; its node 10.0.0.1 is gone))")
    supervisor.on_spawned("w0", 2, 9.0)
    [(worker, reason)] = supervisor.plan(15.0).fence
    supervisor.fence(worker, 15.0, reason)   # the same at each timeout, not nested again
    assert supervisor.health("w0").fence_reason == (
        "did not start in time (after: lost its Ray actor (ActorDiedError; its node 10.0.0.1 is gone))")


def test_supervisor_keeps_the_last_fence_reason_after_a_restart_until_the_next_fence():
    supervisor = Supervisor(SupervisorConfig(restart_delay_s=0.2))
    _ready(supervisor)
    assert supervisor.health("w0").fence_reason == ""   # never fenced
    assert supervisor.on_exit("w0", 0, 1.0, "killed by SIGKILL")
    _ready(supervisor, incarnation=1, now=1.2)
    health = supervisor.health("w0")
    assert (health.state, health.num_restarts, health.fence_reason) == ("ready", 1, "killed by SIGKILL")
    supervisor.fence("w0", 9.0, "unresponsive")
    assert supervisor.health("w0").fence_reason == "unresponsive"


def test_supervisor_responsive_means_ready_and_heard_within_the_health_timeout():
    supervisor = Supervisor(SupervisorConfig(health_timeout_s=2.0))
    supervisor.on_spawned("w0", 0, 0.0)
    assert not supervisor.is_responsive("w0", 0.1)   # starting
    assert supervisor.on_ready("w0", 0, 0.5)
    assert supervisor.is_responsive("w0", 2.5) and not supervisor.is_responsive("w0", 2.6)
    supervisor.on_heard("w0", 0, 2.6)
    assert supervisor.is_responsive("w0", 3.0)
    supervisor.fence("w0", 3.0, "exited")
    assert not supervisor.is_responsive("w0", 3.0) and not supervisor.is_responsive("w9", 3.0)
