"""Changing a running engine's tenant weights and fixed HOT reservations (a config reload).

`EngineTenants` is a part of `shards.engine.LocalEngine` (a base class), kept apart so
that each file holds one concept. It uses the engine's `_lock`, `_dispatcher`, `_channels`,
`config`, `_router_config` and `_dispatch_config`.

Invariant: after `set_tenant_shares` returns, the engine's queue and router use the new
weights, every running worker has been sent them (and the reservations), and a worker
started later (a restart) starts with them; requests already queued keep their places.
A worker applies its message before any request sent after it (one ordered inbox).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cache.policies.reservations import check_static_shares
from shards.fair_queue import checked_weights
from shards.protocol import TenantShares


class EngineTenants:
    """The tenant shares of a `LocalEngine`."""

    def tenant_shares(self) -> tuple[dict[str, float], dict[str, float] | None]:
        """The weights and the fixed reservations (None: planned from demand) in force."""
        with self._lock:
            return dict(self.config.tenant_weights), self._static_shares()

    def _static_shares(self) -> dict[str, float] | None:
        """The fixed reservations in force (None: planned from demand); caller holds the lock."""
        static = dict(self.config.policy_options).get("static_shares")
        return dict(static) if static is not None else None

    def set_tenant_shares(self, weights: Mapping[str, float], static_shares: Mapping[str, float] | None) -> None:
        """Make `weights` (fair queueing, > 0) and `static_shares` (fractions of each
        worker's HOT blocks, summing to at most 1; only the predictive policy has
        reservations) the engine's from now on."""
        checked_weights(weights)   # before anything changes: the workers would refuse them alone
        if static_shares is not None:
            if self.config.policy != "predictive":
                raise ValueError(f"policy {self.config.policy!r} has no reservations (only \"predictive\")")
            check_static_shares(static_shares)
        frozen_weights = tuple(sorted(weights.items()))
        frozen_shares = tuple(sorted(static_shares.items())) if static_shares is not None else None
        message = TenantShares(frozen_weights, frozen_shares)
        with self._lock:
            options = dict(self.config.policy_options)
            options.pop("static_shares", None)
            if frozen_shares is not None:
                options["static_shares"] = frozen_shares
            self.config = dataclasses.replace(self.config, tenant_weights=frozen_weights,
                                              policy_options=tuple(sorted(options.items())))
            self._dispatcher.set_weights(weights)   # its queue, router and both their configs
            # the configs the engine starts them from again say what is in force
            self._router_config = dataclasses.replace(self._router_config, tenant_weights=frozen_weights)
            self._dispatch_config = dataclasses.replace(self._dispatch_config, tenant_weights=frozen_weights)
            for channel in self._channels.values():
                channel.send(message)
