"""Eviction policies by name, for the worker and the simulator.

`make_policy("lru")` is the reactive baseline; `make_policy("predictive", **knobs)` the
forecast-driven policy (knobs: `PredictiveConfig` fields). Two more anchors to beat:
`"ttl"`, Continuum-style TTL pins across tool calls (knobs: `cold_ttl_s`, `max_ttl_s`),
and `"kvflow"`, KVFlow-style steps-to-execution eviction with next-step prefetch. Belady's
oracle needs the future, so only the simulator builds it
(`cache.policies.belady.BeladyPolicy`).
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection, Mapping

from cache.error_text import did_you_mean
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
# policy -> the knobs it takes (lru and kvflow take none)
POLICY_KNOBS: Mapping[str, frozenset[str]] = {
    "predictive": frozenset(f.name for f in dataclasses.fields(PredictiveConfig) if f.init),
    "ttl": frozenset(p.name for p in inspect.signature(TTLPinPolicy.__init__).parameters.values()
                     if p.kind is inspect.Parameter.KEYWORD_ONLY),
}


def unknown_knob_problem(name: str, knobs: Collection[str]) -> str | None:
    """What is wrong with the first of `knobs` that policy `name` does not take, as one
    line naming `policy_options.<knob>`: the other policy that takes it, or else the
    nearest knob `name` takes when it looks like a typo (`pin_cap_frak` -> did you mean
    'pin_cap_frac'?), and the knobs `name` takes; None when it takes them all."""
    known = POLICY_KNOBS[name]
    for knob in knobs:
        if knob in known:
            continue
        owners = [other for other, theirs in POLICY_KNOBS.items() if knob in theirs]
        hint = f"; that is a knob of policy {owners[0]!r}" if owners else did_you_mean(knob, known)
        named = f"policy_options.{knob}" if str(knob).isidentifier() else f"policy_options[{str(knob)!r}]"   # one line
        return f"unknown knob {named}{hint} (known: {', '.join(sorted(known))})"
    return None


def make_policy(name: str, **kwargs: object) -> EvictionPolicy:
    """A fresh policy instance named `name`; unknown names and knobs raise ValueError, as
    does a knob of the wrong type or out of its range (`option_checks.PolicyOptionError`,
    raised where the policy is built, naming `policy_options.<knob>`). A knob the policy
    lacks is named the same way, with the nearest one it has when it looks like a typo
    and the policy that has it when another one does (`unknown_knob_problem`)."""
    if name == "lru":
        if kwargs:
            raise ValueError(f"lru takes no options, got {sorted(kwargs)}")
        return LRUPolicy()
    if name in POLICY_KNOBS and (problem := unknown_knob_problem(name, kwargs)) is not None:
        raise ValueError(f"bad {name} policy option: {problem}")
    try:   # a TypeError left (say a knob's comparison with a value of no number type): still one line
        if name == "predictive":
            return PredictivePolicy(PredictiveConfig(**kwargs))  # type: ignore[arg-type]
        if name == "ttl":
            return TTLPinPolicy(**kwargs)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ValueError(f"bad {name} policy option: {exc}") from None
    if name == "kvflow":
        if kwargs:
            raise ValueError(f"kvflow takes no options, got {sorted(kwargs)}")
        return WorkflowAwarePolicy()
    if name == "belady":
        raise ValueError("belady needs the future; only the simulator (python -m cache.sim) runs it")
    raise ValueError(f"unknown cache policy {name!r}; expected one of {POLICY_NAMES}")
