"""The Ray transport and the cluster it finds: "auto" joins only a cluster RAY_ADDRESS names
or `ray start` recorded (never another process's private instance), a start asking more
than the live nodes hold fails at once, and an actor Ray cannot place, or loses with its
node, says why. Ray's calls are replaced: no Ray instance is started."""
from __future__ import annotations

import asyncio
import re
import socket
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray): Ray transport untested")

import shards.ray_transport  # noqa: E402
from shards.engine import LocalEngine  # noqa: E402
from shards.engine_start import EngineStartError  # noqa: E402
from shards.ray_capacity import PlacementWatch, capacity_problem, lost_actor_cause, unplaced_problem  # noqa: E402
from shards.ray_transport import RayChannel, RayTransport  # noqa: E402
from shards.worker import WorkerConfig  # noqa: E402

ONE_CPU = {"num_cpus": 1, "max_restarts": 0, "scheduling_strategy": "SPREAD"}


def _node(node_id: str, cpus: float, alive: bool = True, gpus: float = 0.0) -> dict:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": f"10.0.0.{node_id[-1]}", "Resources": resources}


@pytest.fixture
def listening_port():
    """A port something answers on, as another gateway's private GCS would."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest.fixture
def recording_ray(monkeypatch, tmp_path):
    """ray.init / shutdown recorded; no RAY_ADDRESS, and a Ray temp dir of the test's own
    (so no cluster recorded by `ray start`, unless the test writes one)."""
    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # what the transport sets for Ray's import (shards/ray_transport.py), taken back after the test
    monkeypatch.setenv("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", {})))
    return calls


# --- finding 1: "auto" never joins a private instance ---------------------------------------

def test_auto_with_nothing_recorded_refuses_even_with_a_ray_instance_running(monkeypatch, recording_ray,
                                                                              listening_port):
    """Ray's own "auto" falls back to any gcs_server process on the machine: here one answers
    (another gateway's private instance), and the start still refuses with one line."""
    import ray._private.services as services

    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset({f"127.0.0.1:{listening_port}"}))
    transport = RayTransport(address="auto")
    with pytest.raises(ConnectionError, match=re.escape('address "auto" names no Ray cluster: RAY_ADDRESS is not '
                                                       'set and `ray start` recorded none in ')):
        transport.connect()
    assert recording_ray == []   # ray.init never ran


def test_auto_joins_the_cluster_ray_start_recorded(recording_ray, tmp_path, listening_port):
    recorded = tmp_path / "ray" / "ray_current_cluster"
    recorded.parent.mkdir()
    recorded.write_text(f"127.0.0.1:{listening_port}\n")
    transport = RayTransport(address="auto")
    transport.connect()
    transport.close()
    assert recording_ray[0][0] == "init" and recording_ray[0][1]["address"] == "auto"


def test_auto_takes_ray_address_first(monkeypatch, recording_ray, listening_port):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{listening_port}")
    transport = RayTransport(address="auto")
    transport.connect()
    transport.close()
    assert [name for name, _ in recording_ray] == ["init", "shutdown"]


# --- finding 2: a start asking more than the cluster holds fails at once ------------------

def test_capacity_problem_names_what_is_asked_and_what_the_cluster_has():
    assert capacity_problem(2, ONE_CPU, [_node("n1", 2)]) is None
    assert capacity_problem(3, ONE_CPU, [_node("n1", 2)]) == (
        "the Ray cluster cannot hold 3 worker(s) x 1 CPU each: its 1 live node(s) have 2 CPU in all "
        "(room for 2 such worker(s))")
    # each actor on one node: 4 CPUs fit in neither 3-CPU node, though they have 6 in all
    assert "room for 0" in capacity_problem(1, {"num_cpus": 4}, [_node("n1", 3), _node("n2", 3)])
    # dead nodes hold nothing; GPUs count too
    assert capacity_problem(1, ONE_CPU, [_node("n1", 8, alive=False)]).endswith(
        "its 0 live node(s) have 0 CPU in all (room for 0 such worker(s))")
    gpu = {"num_cpus": 1, "num_gpus": 1}
    assert "x 1 CPU and 1 GPU each" in capacity_problem(2, gpu, [_node("n1", 8, gpus=1)])
    assert capacity_problem(2, gpu, [_node("n1", 8, gpus=1), _node("n2", 8, gpus=1)]) is None


class _NeverReadyChannel:
    """An actor Ray never places (the old code waited for it the whole start timeout)."""

    def __init__(self, actor_class, worker_id, incarnation, *args) -> None:
        self.worker_id, self.incarnation = worker_id, incarnation

    def send(self, message) -> None:
        pass

    def is_alive(self) -> bool:
        return True

    def pid(self):
        return None

    def kill(self) -> None:
        pass

    def stop(self, timeout_s: float) -> None:
        pass


def test_a_start_asking_more_cpus_than_the_cluster_has_fails_at_once(monkeypatch, recording_ray):
    monkeypatch.setattr(ray, "nodes", lambda: [_node("n1", 2)])
    monkeypatch.setattr(shards.ray_transport, "RayChannel", _NeverReadyChannel)
    engine = LocalEngine("tiny", num_workers=3, transport="ray", threads_per_worker=1)
    began = time.monotonic()
    with pytest.raises(EngineStartError, match=re.escape(
            "the Ray cluster cannot hold 3 worker(s) x 1 CPU each: its 1 live node(s) have 2 CPU in all")):
        asyncio.run(asyncio.wait_for(engine.start(), 20))
    assert time.monotonic() - began < 15


# --- finding 3: an actor Ray cannot place, or loses with its node, says why ----------------

def test_unplaced_problem_says_why():
    assert unplaced_problem(ONE_CPU, [_node("n1", 2, alive=False)], {"CPU": 0.0}, 10).startswith(
        "the Ray cluster has no live node (1 known, all dead: a raylet was lost")
    assert unplaced_problem({"num_cpus": 4}, [_node("n1", 2)], {"CPU": 2.0}, 10) == (
        "no live Ray node has 4 CPU (the largest: 2 CPU)")
    # too little free: only after a wait a slow actor start cannot explain
    assert unplaced_problem(ONE_CPU, [_node("n1", 2)], {"CPU": 0.0}, 10) is None
    assert unplaced_problem(ONE_CPU, [_node("n1", 2)], {"CPU": 0.0}, 30) == (
        "1 CPU asked, the cluster has 0 CPU free of 2 CPU (other actors hold the rest)")
    assert unplaced_problem(ONE_CPU, [_node("n1", 2)], {"CPU": 1.0}, 60) is None


def test_lost_actor_cause_from_the_node_list():
    assert lost_actor_cause("n1", [_node("n1", 2)]) == ""   # killed, its node lives
    assert lost_actor_cause("n1", [_node("n1", 2, alive=False), _node("n2", 2)]) == "its node 10.0.0.1 is gone"
    assert lost_actor_cause("n1", [_node("n1", 2, alive=False)]) == (
        "its node 10.0.0.1 is gone, no live node is left in the Ray cluster to restart it on")
    assert lost_actor_cause("n1", None) == ""   # Ray did not answer


class _Ref:
    def __init__(self, value=None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


class _Method:
    def __init__(self, make) -> None:
        self._make = make

    def remote(self, *args):
        return self._make()


class _FakeActor:
    """Placed after `unplaced_checks` waits (as Ray places an actor once a node has room),
    then lost (ActorDiedError) at its first poll."""

    def __init__(self, unplaced_checks: int) -> None:
        self.unplaced_checks = unplaced_checks
        where = _Ref((4242, "n1"))
        self.pid = _Method(lambda: where)
        self.where = _Method(lambda: where)
        self.poll = _Method(lambda: _Ref(error=ray.exceptions.ActorDiedError()))
        self.send = self.is_serving = _Method(lambda: _Ref(True))


class _FakeActorClass:
    def __init__(self, actor: _FakeActor) -> None:
        self.actor = actor

    def options(self, **options):
        return self

    def remote(self, *args):
        return self.actor


def _fake_ray_calls(monkeypatch, actor: _FakeActor, nodes: list[dict]) -> None:
    def wait(refs, timeout=None):
        if refs[0] is actor.where.remote() and actor.unplaced_checks > 0:
            actor.unplaced_checks -= 1
            return [], refs
        return refs, []

    def get(ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "available_resources", lambda: {})


def _run_channel(actor: _FakeActor, *extra) -> tuple[RayChannel, list[str]]:
    exits, done = [], threading.Event()

    def on_exit(worker_id, incarnation, reason):
        exits.append(reason)
        done.set()

    channel = RayChannel(_FakeActorClass(actor), "w0", 1, WorkerConfig(model="tiny", num_threads=1),
                         lambda *a: None, on_exit, dict(ONE_CPU), *extra)
    assert done.wait(10), "the channel never reported its exit"
    return channel, exits


def test_an_actor_lost_with_its_node_says_so_in_its_exit_reason(monkeypatch):
    """The exit reason is what /health's fence_reason and the operator's line show."""
    actor = _FakeActor(unplaced_checks=0)
    _fake_ray_calls(monkeypatch, actor, [_node("n1", 2, alive=False)])
    channel, exits = _run_channel(actor)
    assert exits == ["lost its Ray actor (ActorDiedError; its node 10.0.0.1 is gone, "
                     "no live node is left in the Ray cluster to restart it on)"]
    assert channel.pid() == 4242


def test_an_actor_ray_cannot_place_is_told_once_per_cause(monkeypatch):
    """Checked every PLACEMENT_CHECK_S while unplaced; one line however many checks and
    actors, and a line again once an actor was placed in between."""
    nodes = [_node("n1", 2, alive=False)]
    watch = PlacementWatch()
    lines: list[str] = []
    watch.on_line = lines.append
    actor = _FakeActor(unplaced_checks=3)
    _fake_ray_calls(monkeypatch, actor, nodes)
    _run_channel(actor, watch)   # three checks while unplaced, then placed (and lost)
    assert len(lines) == 1, lines
    assert re.fullmatch(r"Ray has not placed worker w0's actor in 0 s: the Ray cluster has no live node "
                        r"\(1 known, all dead: a raylet was lost while the GCS still answers\); restart the "
                        r"gateway: its Ray driver was attached to a node that is gone, and does not come back "
                        r"\(docs/ray.md\)", lines[0]), lines
    # placed in between: the same cause is news again; then told once for every actor
    watch.unplaced("w1", ONE_CPU, 20.0)
    watch.unplaced("w2", ONE_CPU, 20.0)
    assert len(lines) == 2 and lines[1].startswith("Ray has not placed worker w1's actor in 20 s: "), lines
    # live nodes without room: the actor starts once one with room joins
    nodes[:] = [_node("n2", 0, alive=True)]
    other = PlacementWatch()
    other.on_line = lines.append
    other.unplaced("w0", ONE_CPU, 10.0)
    assert lines[2].endswith("it starts once a node with room joins (docs/ray.md)"), lines
