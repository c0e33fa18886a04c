"""The backend that serves each configured model, and a local model's engine options as it
runs them.

Invariant: `engine_options_run(model, num_local_workers(config))` is what a local model's
engine is given (its `[models.engine]` options, with the default policy where it names none
and the default threads per worker), checked against that policy (`EngineOptionError` for
a bad one); the start's check (`stepahead serve`), the `uvicorn --factory` start and
`LocalBackend` itself all take them from here, so none checks other options than the ones
run.
"""
from __future__ import annotations

import os

from gateway.backend import Backend
from gateway.config import DEFAULT_LOCAL_POLICY, GatewayConfig, LocalModelConfig
from gateway.embedding_model import EmbeddingModelConfig
from gateway.limiters import Limiters


def engine_options_run(model: LocalModelConfig, num_local_workers: int | None = None) -> dict:
    """`model`'s engine options as its engine runs them, checked (see the module's invariant).
    `num_local_workers`: the workers of every local model the gateway serves; where there are
    more than this model's own and its options set no `threads_per_worker`, each worker gets
    its share of the machine's cores among all of them (at least 1), not among its model's
    workers alone (QA172: a 1-worker model beside a 2-worker one ran 4 threads on 2 cores,
    at a tenth of its speed)."""
    from shards.engine import LocalEngine   # NOTE: imports torch; only for a local model
    options = dict(model.engine_options)
    options.setdefault("policy", DEFAULT_LOCAL_POLICY)   # first: its policy_options are checked against it
    if num_local_workers is not None and num_local_workers > model.num_workers:
        options.setdefault("threads_per_worker", max(1, (os.cpu_count() or 2) // num_local_workers))
    LocalEngine.check_options(options)
    return options


def num_local_workers(config: GatewayConfig) -> int:
    """The workers of all the gateway's local models together."""
    return sum(model.num_workers for model in config.models if isinstance(model, LocalModelConfig))


def build_backend(model, config: GatewayConfig, limiters: Limiters | None = None) -> Backend:
    """The backend for one configured model; `limiters` give what a budgeted tenant's request
    without `max_tokens` may reserve (`Limiters.budget_room`)."""
    budget_room = None if limiters is None else limiters.budget_room
    if isinstance(model, LocalModelConfig):
        from gateway.local import LocalBackend   # NOTE: imports torch; only when needed
        return LocalBackend(model, num_local_workers=num_local_workers(config),
                            default_completion_reserve_tokens=config.default_completion_reserve_tokens,
                            tenant_weights={t.name: t.weight for t in config.tenants},
                            tenant_kv_shares={t.name: t.kv_share for t in config.tenants},
                            tenant_budget_room=budget_room)
    if isinstance(model, EmbeddingModelConfig):
        from gateway.local_embeddings import LocalEmbeddingBackend
        return LocalEmbeddingBackend(model)
    if model.passthrough:
        from gateway.passthrough import PassthroughBackend
        return PassthroughBackend(model, default_completion_reserve_tokens=config.default_completion_reserve_tokens,
                                  tenant_budget_room=budget_room)
    from gateway.upstream import UpstreamBackend
    return UpstreamBackend(model, default_completion_reserve_tokens=config.default_completion_reserve_tokens,
                           tenant_budget_room=budget_room)
