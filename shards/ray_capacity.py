"""Whether the Ray cluster can place the worker actors, and why it does not when it does not.

Ray leaves an actor it cannot place pending, without a word and without end: a start
asking for more CPUs than the cluster has waited its whole start timeout, and a gateway
whose only node lost its raylet (the GCS still up) restarted actors that could never run.
The pure functions here read Ray's node list (`ray.nodes()`: dicts with "NodeID",
"Alive", "NodeManagerAddress", "Resources" — each node's totals) and say, in one line,
what is asked and what the cluster has; `PlacementWatch` tells the operator once per cause.

Invariants: the start refuses only what no wait can cure, a demand beyond what the live
nodes hold in all (`capacity_problem`; an autoscaling cluster must have its nodes up
first); an actor left unplaced is reported, never killed, so it starts by itself once a
node with room (re)joins; a call to Ray that does not answer within NODES_ANSWER_S (its
GCS being lost) counts as "unknown", never as a problem.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping

NODES_ANSWER_S = 2.0       # the GCS answers `ray.nodes()` in milliseconds when it is there
PLACEMENT_CHECK_S = 10.0   # an unplaced actor is looked into this often (the first time after this long)
# "others hold the CPUs" only after this long: a placed actor's Ray worker process may start slowly
# (its `where` answers before the worker's torch imports, shards.ray_transport; QA123)
SHORT_OF_FREE_AFTER_S = 30.0
RESOURCE_NAMES = (("num_cpus", "CPU"), ("num_gpus", "GPU"))


def asked_resources(options: Mapping) -> dict[str, float]:
    """What one actor reserves ("CPU", "GPU"), from its Ray options (`actor_options`)."""
    return {name: float(options[key]) for key, name in RESOURCE_NAMES if options.get(key)}


def _words(resources: Mapping[str, float], names) -> str:
    return " and ".join(f"{resources.get(name, 0.0):g} {name}" for name in names) or "no CPU"


def room_for(asked: Mapping[str, float], resources: Mapping[str, float]) -> int:
    """How many actors asking `asked` fit in `resources` (a node's totals, or what is free)."""
    fits = [math.floor(resources.get(name, 0.0) / amount + 1e-9) for name, amount in asked.items() if amount > 0]
    return min(fits) if fits else 1 << 30


def live(nodes: list[dict]) -> list[dict]:
    return [node for node in nodes if node.get("Alive")]


def _totals(alive: list[dict], asked: Mapping[str, float]) -> dict[str, float]:
    """What the `alive` nodes have in all of each resource `asked` names."""
    return {name: sum(node.get("Resources", {}).get(name, 0.0) for node in alive) for name in asked}


def capacity_problem(num_actors: int, options: Mapping, nodes: list[dict]) -> str | None:
    """Why the live `nodes` can never hold `num_actors` actors with these `options` at once
    (each actor on one node), or None when they can."""
    asked = asked_resources(options)
    alive = live(nodes)
    room = sum(room_for(asked, node.get("Resources", {})) for node in alive)
    if room >= num_actors:
        return None
    total = _totals(alive, asked)
    return (f"the Ray cluster cannot hold {num_actors} worker(s) x {_words(asked, asked)} each: its "
            f"{len(alive)} live node(s) have {_words(total, asked)} in all (room for {room} such worker(s))")


def unplaced_problem(options: Mapping, nodes: list[dict], available: Mapping[str, float] | None,
                     waited_s: float) -> str | None:
    """Why Ray has not placed an actor with these `options` after `waited_s`, or None
    when nothing shows (it may still be starting): no live node, none large enough, or
    (after SHORT_OF_FREE_AFTER_S) too little of the cluster free (`available`)."""
    asked = asked_resources(options)
    alive = live(nodes)
    if not alive:
        return (f"the Ray cluster has no live node ({len(nodes)} known, all dead: a raylet was lost while "
                f"the GCS still answers)")
    if not any(room_for(asked, node.get("Resources", {})) for node in alive):
        return f"no live Ray node has {_words(asked, asked)} (the largest: {_largest(alive, asked)})"
    if available is not None and waited_s >= SHORT_OF_FREE_AFTER_S and not room_for(asked, available):
        total = _totals(alive, asked)
        return (f"{_words(asked, asked)} asked, the cluster has {_words(available, asked)} free of "
                f"{_words(total, asked)} (other actors hold the rest)")
    return None


def _largest(alive: list[dict], asked: Mapping[str, float]) -> str:
    best = max(alive, key=lambda node: tuple(node.get("Resources", {}).get(name, 0.0) for name in asked))
    return _words(best.get("Resources", {}), asked)


def lost_actor_cause(node_id: str | None, nodes: list[dict] | None) -> str:
    """What the node list says about a lost actor's end ("" when nothing): its node gone,
    and whether any node is left to place its replacement."""
    if nodes is None:
        return ""
    causes = []
    node = next((n for n in nodes if n.get("NodeID") == node_id), None)
    if node is not None and not node.get("Alive"):
        causes.append(f"its node {node.get('NodeManagerAddress', node_id)} is gone")
    if not live(nodes):
        causes.append("no live node is left in the Ray cluster to restart it on")
    return ", ".join(causes)


def answer_within(call: Callable[[], object], timeout_s: float = NODES_ANSWER_S):
    """`call()`'s result, or None when it raises or does not return within `timeout_s` (a
    lost GCS: Ray's calls to it block while it reconnects)."""
    box: list = []

    def run() -> None:
        try:
            box.append(call())
        except Exception:
            pass

    thread = threading.Thread(target=run, name="ray-cluster-query", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box[0] if box else None


class PlacementWatch:
    """Tells the operator (`on_line`) why Ray leaves worker actors unplaced, once per cause:
    the same cause for several actors, or at every check, is told once, and again only
    after an actor was placed in between. With no live node left, the gateway's own Ray
    driver lost its raylet too, and never recovers (QA104): the line says to restart it."""

    def __init__(self) -> None:
        self.on_line: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._told: str | None = None

    def unplaced(self, worker_id: str, options: Mapping, waited_s: float) -> None:
        import ray

        nodes = answer_within(ray.nodes)
        if nodes is None:
            return
        available = answer_within(ray.available_resources)
        problem = unplaced_problem(options, nodes, available, waited_s)
        with self._lock:
            if problem is None or problem == self._told:
                return
            self._told = problem
            on_line = self.on_line
        if on_line is None:
            return
        remedy = ("restart the gateway: its Ray driver was attached to a node that is gone, and does not come "
                  "back" if not live(nodes) else "it starts once a node with room joins")   # QA104
        on_line(f"Ray has not placed worker {worker_id}'s actor in {waited_s:.0f} s: {problem}; {remedy} "
                f"(docs/ray.md)")

    def placed(self) -> None:
        with self._lock:
            self._told = None
