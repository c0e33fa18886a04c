"""Eviction policies by name, for the worker and the simulator.

`make_policy("lru")` is the reactive baseline; `make_policy("predictive", **knobs)` the
forecast-driven policy (knobs: `PredictiveConfig` fields). Belady's oracle needs the
future, so only the simulator builds it (`cache.policies.belady.BeladyPolicy`).
"""
from __future__ import annotations

from cache.lru import LRUPolicy
from cache.policies.predictive import PredictivePolicy
from cache.policies.predictive_config import PredictiveConfig
from cache.policy import EvictionPolicy

POLICY_NAMES = ("lru", "predictive")


def make_policy(name: str, **kwargs: object) -> EvictionPolicy:
    """A fresh policy instance named `name`; unknown names and knobs raise ValueError."""
    if name == "lru":
        if kwargs:
            raise ValueError(f"lru takes no options, got {sorted(kwargs)}")
        return LRUPolicy()
    if name == "predictive":
        try:
            config = PredictiveConfig(**kwargs)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ValueError(f"bad predictive policy option: {exc}") from None
        return PredictivePolicy(config)
    if name == "belady":
        raise ValueError("belady needs the future; only the simulator (python -m cache.sim) runs it")
    raise ValueError(f"unknown cache policy {name!r}; expected one of {POLICY_NAMES}")
