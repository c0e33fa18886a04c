"""Tenants' `weight` and `kv_share` on a local model's engine, at its start and at a reload.

A tenant's weight is its share in fair scheduling (the engine's queue and router, each
worker's queue); its kv_share a fixed fraction of each worker's HOT KV blocks (the
predictive policy's reservations; tenants without one share the rest, planned from
demand). Invariants: what `[models.engine]` sets (`tenant_weights`,
`policy_options.static_shares`) wins over the tenants' values, at the start and at every
reload; under a policy without reservations kv_shares are ignored, and the log says so,
in the same words at the start and at a reload (`log_notes`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("stepahead")


@dataclass(frozen=True, slots=True)
class FixedByEngineOptions:
    """Which of the tenants' values a model's `[models.engine]` table replaces."""
    weight: bool
    kv_share: bool


def kv_share_ignored(model: str, policy: str) -> str:
    return (f"model {model!r}: tenants' kv_share is ignored under policy {policy!r} (reservations need "
            "policy = \"predictive\" in [models.engine])")


def weight_fixed(model: str) -> str:
    return f"model {model!r}: tenants' weight is ignored ([models.engine] sets tenant_weights)"


def kv_share_fixed(model: str) -> str:
    return f"model {model!r}: tenants' kv_share is ignored ([models.engine] policy_options sets static_shares)"


def log_notes(notes: list[str]) -> None:
    """Log the lines `with_tenant_shares` (at a start) or `apply_tenant_shares` (at a
    reload) gave, each a warning under the `stepahead:` prefix of the gateway's lines."""
    for note in notes:
        log.warning("stepahead: %s", note)


def positive_shares(kv_shares: dict[str, float]) -> dict[str, float]:
    return {tenant: share for tenant, share in kv_shares.items() if share > 0.0}


def with_tenant_shares(options: dict, weights: dict[str, float], kv_shares: dict[str, float],
                       model: str) -> tuple[FixedByEngineOptions, list[str]]:
    """Put the tenants' values into engine `options` (a policy named already) where the
    options do not set them; what the options fix, and the lines to log (a tenant's
    weight or kv_share the options override, or a policy ignores, is said at the start
    as at a reload: QA204 F2)."""
    policy_options = dict(options.get("policy_options") or {})
    fixed = FixedByEngineOptions(weight="tenant_weights" in options, kv_share="static_shares" in policy_options)
    if weights:
        options.setdefault("tenant_weights", weights)
    shares, notes = positive_shares(kv_shares), []
    if fixed.weight and any(weight != 1.0 for weight in weights.values()):
        notes.append(weight_fixed(model))
    if shares and fixed.kv_share:
        notes.append(kv_share_fixed(model))
    if shares and not fixed.kv_share:
        if options["policy"] == "predictive":
            policy_options["static_shares"] = shares
            options["policy_options"] = policy_options
        else:
            notes.append(kv_share_ignored(model, options["policy"]))
    return fixed, notes


def apply_tenant_shares(engine, model: str, fixed: FixedByEngineOptions, weights: dict[str, float],
                        kv_shares: dict[str, float], changed: tuple[str, ...]) -> list[str]:
    """Put reloaded tenants' values in force on a running `shards.engine.LocalEngine`, as
    a start would have; the lines to log about the `changed` fields not applied, in the
    start's words and where the start would log them (`with_tenant_shares`)."""
    current_weights, static = engine.tenant_shares()
    notes = []
    if fixed.weight:
        # warned of as at a start: only where some tenant sets a weight (QA225 F3: a tenant
        # added or removed at the default weight changes the weights, and set nothing)
        if "weight" in changed and any(weight != 1.0 for weight in weights.values()):
            notes.append(weight_fixed(model))
        weights = current_weights
    shares = positive_shares(kv_shares)
    if fixed.kv_share:
        if shares and "kv_share" in changed:
            notes.append(kv_share_fixed(model))
    elif engine.config.policy == "predictive":
        static = shares or None
    elif shares and "kv_share" in changed:
        notes.append(kv_share_ignored(model, engine.config.policy))
    engine.set_tenant_shares(weights, static)
    return notes
