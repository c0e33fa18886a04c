"""Eviction policies by name, for the worker and the simulator.

`make_policy("lru")` is the reactive baseline; `make_policy("predictive", **knobs)` the
forecast-driven policy (knobs: `PredictiveConfig` fields). Two more anchors to beat:
`"ttl"`, Continuum-style TTL pins across tool calls (knobs: `cold_ttl_s`, `max_ttl_s`),
and `"kvflow"`, KVFlow-style steps-to-execution eviction with next-step prefetch. Belady's
oracle needs the future, so only the simulator builds it
(`cache.policies.belady.BeladyPolicy`).
"""
from __future__ import annotations

from cache.lru import LRUPolicy
from cache.policies.predictive import PredictivePolicy
from cache.policies.predictive_config import PredictiveConfig
from cache.policies.ttl_pin import TTLPinPolicy
from cache.policies.workflow_aware import WorkflowAwarePolicy
from cache.policy import EvictionPolicy

POLICY_NAMES = ("lru", "predictive", "ttl", "kvflow")
# The anchors are told what Continuum and KVFlow are told (the tool a response asked for
# and that tool's past durations: `cache.tool_call_source.ToolCallSource`), not our forecasts.
TOLD_TOOL_CALLS = frozenset({"ttl", "kvflow"})


def make_policy(name: str, **kwargs: object) -> EvictionPolicy:
    """A fresh policy instance named `name`; unknown names and knobs raise ValueError, as
    does a knob of the wrong type or out of its range (`option_checks.PolicyOptionError`,
    raised where the policy is built, naming `policy_options.<knob>`)."""
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
    if name == "ttl":
        try:
            return TTLPinPolicy(**kwargs)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ValueError(f"bad ttl policy option: {exc}") from None
    if name == "kvflow":
        if kwargs:
            raise ValueError(f"kvflow takes no options, got {sorted(kwargs)}")
        return WorkflowAwarePolicy()
    if name == "belady":
        raise ValueError("belady needs the future; only the simulator (python -m cache.sim) runs it")
    raise ValueError(f"unknown cache policy {name!r}; expected one of {POLICY_NAMES}")
