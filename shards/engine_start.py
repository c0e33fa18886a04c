"""The engine's start: prepare the model, spawn the workers, wait until all are ready;
or stop midway, when cancelled (Ctrl+C) or when something fails.

`EngineStart` is a part of `shards.engine.LocalEngine` (its base class), kept apart so
that each file holds one concept; it works on the engine's state (`config`, `_lock`,
`_ready`, `_channels`, `_transport`, `_supervisor`, `_dispatcher`, ...), set up in
`LocalEngine.__init__`.

Invariants:
- `start` either returns with every worker ready and supervision running, or raises
  having killed every worker and child it began (none outlives a failed start);
- after `cancel_start`, `start` raises StartCancelled: at once while the model is
  prepared in a child, else when the step under way returns (a spawn waits for the fork
  server, which may still be importing torch: `stepahead serve` then kills it,
  `shards.local_transport.stop_fork_server_if_idle`, and the spawn fails at once);
- a start that fails, or whose task is cancelled, leaves no thread behind in it either
  (but Ray's driver thread, still in a `ray.init` that cannot be interrupted:
  `RayTransport.connect` returns at once, leaving the thread to end with the process; and
  a spawn still waiting on the fork server, which kills its worker once it is forked);
- `cancel_start` takes no lock (it is called on the event loop) and does nothing once
  started; no spawn holds the engine's lock while the fork server answers (5-15 s while a
  new one imports torch, as long as it is stopped), so requests and /health never wait on
  it (QA137: `_spawn`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

from shards.chat_template import supports_tools
from shards.spawning_channel import SpawningChannel
from shards.probed_costs import ProbedCosts, ProbeKey
from shards.transport import StartCancelled, make_transport
from shards.worker_events import probe_reason, workers_starting_line

WORKER_START_TIMEOUT_S = 300.0
ABANDON_JOIN_S = 2.0   # a killed worker's exit, seen by its reader thread


class EngineStartError(RuntimeError):
    pass


class EngineStart:
    """The start of a `LocalEngine` (the module docstring says what it guarantees)."""

    async def start(self) -> None:
        """Prepare the model, start the workers, wait until all are ready. On failure, or
        StartCancelled after `cancel_start`, what the start had begun is killed before
        the exception leaves (no worker or child outlives a failed start)."""
        try:
            await self._start()
        except BaseException as exc:
            was_cancelled = self._start_cancelled.is_set()
            # a step still running in a thread (the wait for the workers, the model's
            # preparation) stops too: the task's own cancellation (a timeout around
            # `start`) does not reach a thread
            self.cancel_start()
            self._abandon_start()
            if was_cancelled and not isinstance(exc, (StartCancelled, asyncio.CancelledError)):
                raise StartCancelled("the start was stopped before the workers were ready") from exc   # e.g. a fork failed for it
            raise

    def cancel_start(self) -> None:
        """From any thread: stop a start in progress as soon as it can be; `start` then
        raises StartCancelled. A model's preparation in a child stops at once, the
        workers' spawns once the fork server answers (or is killed). Nothing happens once
        the start is done."""
        # NOTE: takes no lock: this runs on the event loop
        if self._supervise_task is not None:
            return
        self._start_cancelled.set()
        transport = self._transport
        if transport is not None:
            transport.cancel_start()

    async def _start(self) -> None:
        from shards.model_files import check_model, dtype_without_probe, load_tokenizer, needs_torch_to_prepare

        # a bad model, dtype or (local) device fails here, not in every worker; a Ray
        # worker's device is on its own node. The GGUF is converted once, before spawning,
        # and "auto" settled, in a child process when that takes torch (this one never
        # imports it for a CPU model)
        device = self.config.device if self.transport_name == "local" else None
        await asyncio.to_thread(check_model, self.config.model, device, self.config.dtype)
        transport = await asyncio.to_thread(make_transport, self.transport_name, self._transport_options)
        self._transport = transport
        self._raise_if_cancelled()   # after: so cancel_start either finds the transport or is seen here
        connect = getattr(transport, "connect", None)   # Ray's: joins or starts the cluster
        if connect is not None:
            await asyncio.to_thread(connect)
            await self._check_ray_cluster(transport)
        if needs_torch_to_prepare(self.config.model, device, self.config.dtype):
            dtype = await asyncio.to_thread(transport.prepare_model, self.config.model, device, self.config.dtype)
        else:   # settled without asking the device (or left to Ray workers: device None)
            dtype = dtype_without_probe(self.config.dtype, self.config.model)
        if device is not None:
            self.config = dataclasses.replace(self.config, dtype=dtype)
        if not self._prefix_transfer:
            self._dispatcher.router.config = dataclasses.replace(self._router_config, can_transfer=False)
        elif not self._transport.can_share_memory:  # copies travel as bytes with the messages
            self.config = dataclasses.replace(self.config, inline_transfers=True)
            self._dispatcher.config = dataclasses.replace(self._dispatch_config, inline_transfers=True)
        # costs probed at an earlier start on this machine spare the workers their probe
        local = self.transport_name == "local"
        probe_key = ProbeKey.of(self.config, self.num_workers) if self._reuse_probed_costs and local else None
        probes = ProbedCosts()
        stored = probes.get(probe_key, time.time()) if probe_key is not None else None
        if stored is not None:
            self._probed_costs.update(stored)   # so no worker probes (see _spawn)
        # before the spawns: a tokenizer that cannot load fails the start at once, not
        # after the fork server has imported torch. NOTE: on the event loop's thread, not
        # in a worker thread: transformers resolves its names lazily, which two threads at
        # once can break (models start side by side)
        self.tokenizer = load_tokenizer(self.config.model)
        self.supports_tools = supports_tools(self.tokenizer)
        if self.on_start_progress is not None:
            probe = probe_reason(reuse=self._reuse_probed_costs, local=local, stored=stored is not None)
            self.on_start_progress(workers_starting_line(self.num_workers, probe=probe))
        for i in range(self.num_workers):
            await asyncio.to_thread(self._spawn, f"w{i}")
        await asyncio.to_thread(self._wait_ready)
        self.cost_probe = "reused" if stored is not None else "probed"
        if probe_key is not None and stored is None:
            with self._lock:
                probed = dict(self._probed_costs)
            await asyncio.to_thread(probes.put, probe_key, probed, time.time())
        self._raise_if_cancelled()
        self._supervise_task = asyncio.create_task(self._supervise())

    async def _check_ray_cluster(self, transport) -> None:
        """Ray's: a cluster whose live nodes can never hold the workers fails the start at
        once (Ray would leave the extra actors pending without a word); why Ray leaves an
        actor unplaced later is told as the start's progress, then as a worker event."""
        capacity_problem = getattr(transport, "capacity_problem", None)
        if capacity_problem is not None:
            problem = await asyncio.to_thread(capacity_problem, self.num_workers, self.config)
            if problem is not None:
                raise EngineStartError(problem)
        watch = getattr(transport, "placement_watch", None)
        if watch is not None:
            watch.on_line = self._tell_placement

    def _tell_placement(self, line: str) -> None:
        if self._supervise_task is None and self.on_start_progress is not None:
            self.on_start_progress(line)
        else:
            self._tell_operator(line)

    def _raise_if_cancelled(self) -> None:
        if self._start_cancelled.is_set():
            raise StartCancelled("the start was stopped before the workers were ready")

    def _abandon_start(self) -> None:
        """Kill what a failed start spawned (workers still loading would not read a
        Shutdown for seconds) and close the transport."""
        with self._lock:
            self._stopping = True
            channels = list(self._channels.values())
        for channel in channels:
            channel.kill()
        for channel in channels:
            channel.stop(ABANDON_JOIN_S)
        if self._transport is not None:
            self._transport.close()

    def _spawn(self, worker_id: str) -> None:
        """Start the next incarnation of `worker_id`. Invariant: the incarnation and its
        channel (a `SpawningChannel` until the process runs) are registered under the lock
        before the transport's spawn, which runs outside it (it waits on the fork server),
        so no message of the new incarnation is handled before its channel is registered.
        During the start the spawn runs here (what it raises fails the start); a restart's
        in a thread of its own, so that the supervision goes on (pings, `max_queue_wait_s`
        expiries), and one that raises is that incarnation's exit (fenced, restarted)."""
        with self._lock:
            if self._stopping or self._start_cancelled.is_set():
                return
            previous = self._channels.get(worker_id)
            incarnation = previous.incarnation + 1 if previous is not None else 0
            self._supervisor.on_spawned(worker_id, incarnation, time.monotonic())
            # a restart reuses the costs its worker probed at the start: the probe takes
            # seconds of CPU the workers still serving would otherwise lose
            config = (dataclasses.replace(self.config, measure_costs=False) if worker_id in self._probed_costs
                      else self.config)
            spawning = self._channels[worker_id] = SpawningChannel(worker_id, incarnation)
            restart = self._supervise_task is not None
        if not restart:
            self._start_process(spawning, config)
            return
        threading.Thread(target=self._restart_process, args=(spawning, config),
                         name=f"spawn-{worker_id}.{incarnation}", daemon=True).start()

    def _start_process(self, spawning: SpawningChannel, config) -> None:
        """Have the transport start `spawning`'s process (outside the lock), then put its
        channel in `spawning`'s place."""
        try:
            channel = self._transport.spawn(spawning.worker_id, spawning.incarnation, config,
                                            self._on_message, self._on_exit)
        except BaseException:
            spawning.fail()
            raise
        with self._lock:
            spawning.attach(channel)   # what was sent meanwhile goes first; a kill asked meanwhile is done
            if self._channels.get(spawning.worker_id) is spawning:   # not a later incarnation's
                self._channels[spawning.worker_id] = channel

    def _restart_process(self, spawning: SpawningChannel, config) -> None:
        """A restart's spawn, in a thread of its own: one that fails is the incarnation's exit."""
        try:
            self._start_process(spawning, config)
        except Exception as exc:   # noqa: BLE001 -- told as the exit; the supervisor restarts it
            self._on_exit(spawning.worker_id, spawning.incarnation,
                          f"could not be started ({type(exc).__name__}: {exc})")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        with self._ready:
            while len(self._supervisor.ready_workers()) < self.num_workers:
                fenced = [h for h in self._supervisor.workers() if h.state == "fenced"]
                self._raise_if_cancelled()
                if fenced or self._start_error:
                    raise EngineStartError(self._start_error or
                                           f"worker {fenced[0].worker_id} exited at start")
                if time.monotonic() > deadline:
                    raise EngineStartError("workers did not become ready in time")
                self._ready.wait(0.2)
