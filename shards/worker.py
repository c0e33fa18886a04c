"""A model worker: one process, one model, one tokenizer, one prefix cache.

The loop alternates between admitting one waiting request (prefill of its uncached
suffix) and one decode step for every running request, so several concurrent requests
make progress together. Every request gets exactly one terminal event (FinishEvent or
ErrorEvent); its block references are released on every path (finish, stop, cancel,
error), so blocks are never leaked.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import time
import traceback
from collections import deque
from dataclasses import dataclass

from shards.protocol import (CancelRequest, ErrorEvent, FinishEvent, Shutdown, StatsRequest,
                             TokenEvent, WorkerFailed, WorkerReady, WorkerStats, WorkItem)

IDLE_WAIT_S = 0.05


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    model: str = "smollm2"
    num_hot_blocks: int = 4096
    num_host_blocks: int = 0
    block_size: int = 16
    policy: str = "lru"
    max_running: int = 8
    num_threads: int = 1


def stats_as_dict(stats) -> dict:
    """CacheStats as plain builtins, to cross the process boundary."""
    return {
        "tenants": {name: dataclasses.asdict(t) for name, t in stats.tenants.items()},
        "tiers": {tier.value: dataclasses.asdict(t) for tier, t in stats.tiers.items()},
        "num_demotions": stats.num_demotions, "num_promotions": stats.num_promotions,
        "num_drops": stats.num_drops,
    }


def _policy(name: str):
    if name == "lru":
        return None
    from cache.policies import make_policy  # the predictive policies live there

    return make_policy(name)


class WorkerLoop:
    """The scheduling loop, separate from process plumbing so tests can drive it."""

    def __init__(self, worker_id: str, config: WorkerConfig, runner, tokenizer, emit):
        self.worker_id = worker_id
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self.emit = emit
        self.waiting: deque[WorkItem] = deque()
        self.running: dict[str, object] = {}
        self.max_context = runner.loaded.max_context_tokens

    def handle(self, message) -> bool:
        """Apply one inbox message; False means shut down."""
        if isinstance(message, WorkItem):
            self.waiting.append(message)
        elif isinstance(message, CancelRequest):
            self._cancel(message.request_id)
        elif isinstance(message, StatsRequest):
            self.emit(WorkerStats(self.worker_id, stats_as_dict(self.runner.blocks.stats()),
                                  len(self.running), len(self.waiting)))
        elif isinstance(message, Shutdown):
            return False
        return True

    def _cancel(self, request_id: str) -> None:
        for item in list(self.waiting):
            if item.request_id == request_id:
                self.waiting.remove(item)
                self.emit(FinishEvent(request_id, "cancelled", len(item.prompt_token_ids), 0, 0, 0.0,
                                      self.worker_id))
                return
        seq = self.running.pop(request_id, None)
        if seq is not None:
            self.runner.release(seq)
            self._finish_event(seq, "cancelled")

    def _finish_event(self, seq, reason: str) -> None:
        self.emit(FinishEvent(
            seq.item.request_id, reason, len(seq.item.prompt_token_ids), seq.num_cached_tokens,
            len(seq.output_ids), seq.first_token_s - seq.started_s, self.worker_id))

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> None:
        """Admit at most one waiting request, then one decode step for each running one."""
        if self.waiting and len(self.running) < self.config.max_running:
            self._admit(self.waiting.popleft())
        for request_id in list(self.running):
            seq = self.running[request_id]
            try:
                token = self.runner.step(seq)
            except Exception as exc:  # a failed request must not take the worker down
                self.running.pop(request_id)
                self.runner.release(seq)
                self.emit(ErrorEvent(request_id, f"generation failed: {exc}", "internal_error"))
                continue
            self._after_token(seq, token)

    def _admit(self, item: WorkItem) -> None:
        if not item.prompt_token_ids:
            self.emit(ErrorEvent(item.request_id, "the prompt is empty", "invalid_prompt"))
            return
        if len(item.prompt_token_ids) >= self.max_context:
            self.emit(ErrorEvent(
                item.request_id, f"the prompt has {len(item.prompt_token_ids)} tokens; this model's "
                f"context length is {self.max_context}", "context_length_exceeded"))
            return
        try:
            seq, token = self.runner.start(item, self.tokenizer)
        except Exception as exc:
            traceback.print_exc()
            self.emit(ErrorEvent(item.request_id, f"prefill failed: {exc}", "internal_error",
                                 retryable=True))
            return
        self.running[item.request_id] = seq
        self._after_token(seq, token)
        if item.request_id in self.running:
            self.runner.commit_prompt(seq)

    def _after_token(self, seq, token: int) -> None:
        params = seq.item.sampling
        stop_token = self.runner.is_stop_token(token, params)
        delta = "" if stop_token else seq.detokenizer.push(token)
        ids = [] if stop_token else [token]
        num_out = len(seq.output_ids) - (1 if stop_token else 0)
        out_of_room = seq.num_kv_tokens + 1 >= self.max_context
        done_reason = None
        if stop_token or seq.detokenizer.stopped:
            done_reason = "stop"
        elif num_out >= params.max_tokens or out_of_room:
            done_reason = "length"
        if done_reason is not None:
            delta += seq.detokenizer.flush() if not seq.detokenizer.stopped else ""
        if ids or delta:
            self.emit(TokenEvent(seq.item.request_id, ids, delta))
        if done_reason is not None:
            if stop_token:
                seq.output_ids.pop()
            self.running.pop(seq.item.request_id, None)
            self.runner.finish(seq)
            self._finish_event(seq, done_reason)


def worker_main(worker_id: str, config: WorkerConfig, inbox, outbox) -> None:
    """Process entry point: load the model, announce readiness, serve until Shutdown."""
    import torch

    torch.set_num_threads(max(1, config.num_threads))
    try:
        from shards.model_loader import load_model
        from shards.model_runner import ModelRunner

        loaded = load_model(config.model)
        runner = ModelRunner(loaded, num_hot_blocks=config.num_hot_blocks,
                             num_host_blocks=config.num_host_blocks, block_size=config.block_size,
                             policy=_policy(config.policy))
    except Exception as exc:
        outbox.put(WorkerFailed(worker_id, f"{type(exc).__name__}: {exc}"))
        return
    loop = WorkerLoop(worker_id, config, runner, loaded.tokenizer, outbox.put)
    outbox.put(WorkerReady(worker_id, loaded.model_id, loaded.max_context_tokens, os.getpid()))
    alive = True
    while alive:
        try:
            message = inbox.get(timeout=IDLE_WAIT_S) if not loop.has_work() else inbox.get_nowait()
        except queue.Empty:
            message = None
        while message is not None and alive:
            alive = loop.handle(message)
            try:
                message = inbox.get_nowait()
            except queue.Empty:
                message = None
        if alive and loop.has_work():
            loop.step()
    time.sleep(0)
