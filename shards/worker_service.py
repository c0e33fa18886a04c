"""Serving one worker over any transport: load, measure, announce, loop until Shutdown.

`serve` is the same code in a local process (`local_transport`) and in a Ray actor
(`ray_transport`); only `receive` (next inbox message, or None after a timeout) and
`emit` (send one message to the engine) differ. The model is loaded and the cost probe
runs before `WorkerReady`, so the engine never routes to a worker still loading; one
that cannot load says why (`WorkerFailed`, which the engine shows as its fence reason)
and its process exits with START_FAILED_EXIT_STATUS, never 0 (a clean exit's status).
"""
from __future__ import annotations

import os
import traceback
from collections.abc import Callable

from shards.model_files import ModelLoadError
from shards.protocol import WorkerFailed, WorkerReady
from shards.worker import WorkerConfig, WorkerLoop

IDLE_WAIT_S = 0.02
START_FAILED_EXIT_STATUS = 3   # as the gateway's own failed start


def make_policy(name: str, options: tuple[tuple[str, object], ...] = ()):
    """The eviction policy named in the config, built with `options` (e.g. the
    predictive policy's per-tenant `static_shares`); None means the block manager's LRU."""
    if name == "lru" and not options:
        return None
    from cache.policies import make_policy as make  # the predictive policies live there

    return make(name, **dict(options))


def serve(worker_id: str, config: WorkerConfig, receive: Callable[[float], object | None],
          emit: Callable[[object], None]) -> None:
    """Run a worker until it receives Shutdown. A start failure is reported as
    WorkerFailed, then ends the worker with SystemExit(START_FAILED_EXIT_STATUS): a
    worker process exits with it; a Ray actor's serve thread just ends (threading
    ignores SystemExit). Raises nothing else."""
    import torch
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(max(1, config.num_threads))
    # NOTE: no "Loading weights" bars from every worker interleaved on the gateway's
    # terminal; tqdm's lock is also a named semaphore a killed worker would leak
    transformers_logging.disable_progress_bar()
    try:
        from shards.kv_transfer import measure_costs
        from shards.model_loader import load_model, worker_device
        from shards.model_runner import ModelRunner

        index = int(worker_id.lstrip("w")) if worker_id.lstrip("w").isdigit() else 0
        device = worker_device(config.device, index, torch.cuda.device_count() if config.device == "cuda" else 0)
        loaded = load_model(config.model, dtype=config.dtype, device=device)
        runner = ModelRunner(loaded, num_hot_blocks=config.num_hot_blocks,
                             num_host_blocks=config.num_host_blocks, block_size=config.block_size,
                             policy=make_policy(config.policy, config.policy_options),
                             prefix_caching=config.prefix_caching,
                             evict_background_first=config.flex_blocks_evicted_first)
        costs = (measure_costs(runner, config.prefill_chunk_tokens, inline=config.inline_transfers)
                 if config.measure_costs else None)
    except Exception as exc:
        if not isinstance(exc, ModelLoadError):   # a stated reason needs no traceback; a bug does
            traceback.print_exc()
        emit(WorkerFailed(worker_id, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(START_FAILED_EXIT_STATUS) from None
    loop = WorkerLoop(worker_id, config, runner, loaded.tokenizer, emit, batched=True)
    emit(WorkerReady(worker_id, loaded.model_id, loaded.max_context_tokens, os.getpid(), costs,
                     device=str(runner.device), dtype=str(runner.layout.dtype).removeprefix("torch.")))

    def drain() -> None:
        while loop.alive:
            message = receive(0.0)
            if message is None:
                return
            loop.handle(message)

    while loop.alive:
        message = receive(0.0 if loop.has_work() else IDLE_WAIT_S)
        if message is not None:
            loop.handle(message)
            drain()
        if loop.alive and loop.has_work():
            loop.step(poll=drain)
        if loop.alive:
            loop.housekeeping()
