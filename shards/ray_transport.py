"""Workers as Ray actors, so one router drives workers across a Ray cluster.

Each actor (`shards.ray_actor.ActorBody`) runs the same `worker_service.serve` loop in a
thread of its own, fed by an in-actor inbox. The engine side keeps, per actor, one reader
thread that long-polls the actor's outbox (`poll`) and hands the messages over in order;
when Ray reports the actor dead (`RayActorError`), the reader reports the exit.

NOTE: a threaded actor may run method calls out of submission order, so `send` numbers
its messages and the actor applies them strictly in sequence.

An actor counts as placed once its `where` answers, so the actor process answers at once:
`shards.ray_actor` (imported to unpickle the actor class) and `shards.worker_config` import no
torch, and the constructor only starts the serve thread, which imports the worker (seconds,
tens of them on a loaded machine) and loads the model (QA123: else our own starting actors' CPUs read as
"held by other actors").

Shared-memory prefix transfer is off under Ray (actors may live on other machines);
routing, fairness, health checks and restarts work as with local processes.
"""
from __future__ import annotations

import itertools
import os
import threading
import time

from shards.ray_actor import ActorBody
from shards.ray_address import address_problem, check_reachable
from shards.ray_capacity import (PLACEMENT_CHECK_S, PlacementWatch, answer_within, capacity_problem,
                                 lost_actor_cause)
from shards.transport import OnExit, OnMessage, StartCancelled
from shards.worker_config import WorkerConfig

POLL_WAIT_S = 0.2


class RayChannel:
    """One actor incarnation. Until Ray places the actor, its reader asks `watch` every
    PLACEMENT_CHECK_S why not (told to the operator once per cause); when the actor is
    lost, the exit reason adds what the node list says (its node gone, none left)."""

    def __init__(self, actor_class, worker_id: str, incarnation: int, config: WorkerConfig,
                 on_message: OnMessage, on_exit: OnExit, actor_options: dict,
                 watch: PlacementWatch | None = None) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        self._on_message = on_message
        self._on_exit = on_exit
        self._options = actor_options
        self._watch = watch or PlacementWatch()
        self._node_id: str | None = None
        self._actor = actor_class.options(**actor_options).remote(worker_id, config)
        self._seq = itertools.count()
        self._send_lock = threading.Lock()
        self._alive = True
        self._stopping = False
        self._pid: int | None = None
        self._thread = threading.Thread(target=self._read, name=f"ray-reader-{worker_id}.{incarnation}",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import ray

        reason = "ended its serve loop"
        try:
            self._wait_placed()
            while not self._stopping:
                messages = ray.get(self._actor.poll.remote(POLL_WAIT_S))
                for message in messages:
                    self._on_message(self.worker_id, self.incarnation, message)
                if not messages and not ray.get(self._actor.is_serving.remote()):
                    # the serve loop ended (Shutdown, or a failed start): what it sent just before
                    # it ended, after that empty poll (a WorkerFailed, QA123), is read still
                    while last := ray.get(self._actor.poll.remote(0.0)):
                        for message in last:
                            self._on_message(self.worker_id, self.incarnation, message)
                    break
        except Exception as exc:  # RayActorError and friends: the actor is gone
            cause = "" if self._stopping else lost_actor_cause(self._node_id, answer_within(ray.nodes))
            reason = f"lost its Ray actor ({type(exc).__name__}{'; ' + cause if cause else ''})"
        finally:
            self._alive = False
            self._on_exit(self.worker_id, self.incarnation, reason)

    def _wait_placed(self) -> None:
        """Wait until the actor runs (its pid and node known), asking `watch` why not
        every PLACEMENT_CHECK_S; raises what Ray raises for an actor lost or killed."""
        import ray

        where = self._actor.where.remote()
        began = time.monotonic()
        while not ray.wait([where], timeout=PLACEMENT_CHECK_S)[0]:
            if self._stopping:
                return
            self._watch.unplaced(self.worker_id, self._options, time.monotonic() - began)
        self._pid, self._node_id = ray.get(where)
        self._watch.placed()

    def send(self, message) -> None:
        if not self._alive:
            return
        with self._send_lock:
            self._actor.send.remote(next(self._seq), message)

    def is_alive(self) -> bool:
        return self._alive

    def pid(self) -> int | None:
        return self._pid

    def kill(self) -> None:
        import ray

        try:
            ray.kill(self._actor, no_restart=True)
        except Exception:
            pass

    def stop(self, timeout_s: float) -> None:
        """The caller sent Shutdown: wait for the loop to end, then remove the actor."""
        self._thread.join(timeout_s)
        self._stopping = True
        self.kill()


def actor_options(config: WorkerConfig, num_cpus: float | None, num_gpus: float | None) -> dict:
    """Ray options of one worker actor: its CPU reservation (default: its threads) and,
    when the model runs on CUDA, a GPU (default: one), which Ray makes the actor's only
    visible device, so `device = "cuda"` means that GPU."""
    options = {"num_cpus": num_cpus if num_cpus is not None else config.num_threads,
               "max_restarts": 0, "scheduling_strategy": "SPREAD"}
    if config.device.startswith("cuda"):
        options["num_gpus"] = num_gpus if num_gpus is not None else 1
    return options


class RayTransport:
    """`address` (`address_problem` lists the forms): None or "local" starts a new local
    Ray instance in this process; any other joins a cluster, once a TCP connect shows it
    is there (`check_reachable`; "auto" only the cluster RAY_ADDRESS names or `ray start`
    recorded, `shards.ray_address`). `num_cpus_per_worker` / `num_gpus_per_worker` are each
    actor's reservations (`actor_options`); `placement_watch.on_line` hears why Ray leaves
    actors unplaced (`shards.ray_capacity`).

    Invariant: Ray is joined or started (`connect`) and shut down (`close`) by one daemon
    thread, which lives from `connect` to `close`: the processes of a local instance die
    with the thread that started them (Ray's parent-death signal is per thread), and
    `ray.init` cannot be interrupted, so a stop during it leaves that thread to finish on
    its own (and shut Ray down) or to end with the process."""

    name = "ray"
    can_share_memory = False

    def __init__(self, address: str | None = None, num_cpus_per_worker: float | None = None,
                 namespace: str = "stepahead", num_gpus_per_worker: float | None = None) -> None:
        self._address = "local" if address is None else address
        problem = address_problem(self._address)
        if problem is not None:
            raise ValueError(f"transport option address {problem}")
        self._namespace = namespace
        self._num_cpus = num_cpus_per_worker
        self._num_gpus = num_gpus_per_worker
        self._actor_class = None
        self._owns_ray = False
        self._error: BaseException | None = None
        self._connected = threading.Event()   # ray.init returned (or Ray was up already)
        self._settled = threading.Event()     # connected, failed or cancelled: `connect` returns
        self._cancelled = False
        self._release = threading.Event()     # `close`: the driver thread shuts Ray down
        self._driver: threading.Thread | None = None
        self.placement_watch = PlacementWatch()

    def connect(self) -> None:
        """Join (or start) Ray on the driver thread; return once connected. Raises what
        ray.init raised (ConnectionError at once when nothing answers at the address),
        or StartCancelled at once after `cancel_start`."""
        self._driver = threading.Thread(target=self._drive, name="ray-driver", daemon=True)
        self._driver.start()
        self._settled.wait()
        if self._cancelled:
            raise StartCancelled("the start was stopped while Ray was connecting")
        if self._error is not None:
            raise self._error

    def _drive(self) -> None:
        try:
            # Ray's C++ core installs a failure-signal handler in this (the driver) process that
            # catches SIGTERM: after the gateway's own graceful stop it printed a stack dump and
            # the process could end 134, not 0 (systemd and Kubernetes stop with SIGTERM). The
            # operator may set the variable to 0 to keep it; read when Ray is first imported.
            os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
            import ray

            if not ray.is_initialized():
                # NOTE: "auto" stays "auto" for ray.init once `check_reachable` found RAY_ADDRESS
                # or a recorded cluster: Ray then resolves it to the same address (never to the
                # process scan it falls back to without both) and finds its auth token itself
                check_reachable(self._address)
                repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                path = os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p)
                ray.init(address=self._address, namespace=self._namespace, include_dashboard=False,
                         log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
                self._owns_ray = True
            self._actor_class = ray.remote(max_concurrency=4)(ActorBody)
        except BaseException as exc:
            self._error = exc
            self._settled.set()
            return
        self._connected.set()
        self._settled.set()
        self._release.wait()
        if self._owns_ray:
            ray.shutdown()

    def spawn(self, worker_id: str, incarnation: int, config: WorkerConfig,
              on_message: OnMessage, on_exit: OnExit) -> RayChannel:
        options = actor_options(config, self._num_cpus, self._num_gpus)
        return RayChannel(self._actor_class, worker_id, incarnation, config, on_message, on_exit, options,
                          self.placement_watch)

    def capacity_problem(self, num_workers: int, config: WorkerConfig) -> str | None:
        """Why the cluster's live nodes can never hold `num_workers` actors (None: they can,
        or Ray did not answer): checked before the first spawn, so such a start fails at once."""
        import ray

        nodes = answer_within(ray.nodes)
        options = actor_options(config, self._num_cpus, self._num_gpus)
        return None if nodes is None else capacity_problem(num_workers, options, nodes)

    def prepare_model(self, model: str, device: str | None, dtype: str) -> str:
        from shards.model_loader import prepare_model

        return prepare_model(model, device, dtype)

    def cancel_start(self) -> None:
        """A `connect` under way returns (StartCancelled) at once; the model is prepared
        in this process (and each node's worker settles its own dtype)."""
        self._cancelled = True
        self._settled.set()

    def close(self) -> None:
        """Shut down the Ray this transport started, waiting for it unless `ray.init` is
        still under way (the driver thread then does it when that returns)."""
        self._release.set()
        if self._driver is not None and self._connected.is_set():
            self._driver.join()
