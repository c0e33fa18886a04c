"""Whose forecasts the predictive policy follows: a mixin of `PredictivePolicy`
(predictive.py), split out by concern; it reads the policy's per-tenant state.

A session's forecast drives its blocks, pin and prefetch when the forecast says it is
confident and its tenant's recent forecasts score no worse than always guessing the
tenant's return rate (accuracy.py); else its blocks rank as under LRU.

Invariant: `TenantState.accuracy` is scored only by the policy's waits (each forecast
once); the verdicts here only read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cache.policies.accuracy import TenantAccuracy

if TYPE_CHECKING:
    from cache.policies.predictive_config import PredictiveConfig
    from cache.policies.valuation import SessionState


@dataclass(slots=True)
class TenantState:
    """A tenant as the predictive policy keeps it: its cached HOT blocks, whether its
    latest forecast was confident, and how its forecasts scored."""
    num_hot: int = 0
    is_confident: bool = False
    accuracy: TenantAccuracy = field(default_factory=TenantAccuracy)


class ForecastTrust:
    """Which tenants' and sessions' forecasts the predictive policy follows."""

    config: PredictiveConfig
    _tenants: dict[str, TenantState]

    def is_trusted(self, tenant: str) -> bool:
        """Whether `tenant`'s latest forecast was confident and its recent ones not worse
        than its base rate (for what is the tenant's, not a session's: the sharing rate of
        blocks several of its sessions used)."""
        state = self._tenants.get(tenant)
        return state is not None and state.is_confident and self._is_accurate(state)

    def is_session_trusted(self, session: SessionState) -> bool:
        """Whether a session's forecast drives its blocks, pin and prefetch (else they are
        ranked as LRU): the forecast said it is confident, and its tenant's recent
        forecasts were not worse than the base rate. NOTE: per session, as a tenant's
        forecasts may differ: a cold tenant's model may trust what a tool wait says
        (the tool's learned duration) before it can say who comes back after an answer."""
        if not session.is_confident:
            return False
        state = self._tenants.get(session.tenant)
        return state is not None and self._is_accurate(state)

    def forecast_verdicts(self) -> dict[str, bool]:
        """Per tenant whose forecasts were scored `accuracy_min_events` times: whether they
        are still followed (True), or proved worse than its base rate, so its blocks are
        ranked as LRU's (False) until they improve."""
        cfg = self.config
        verdicts = {t: s.accuracy.is_accurate(cfg.accuracy_min_events, cfg.accuracy_margin)
                    for t, s in self._tenants.items()}
        return {tenant: verdict for tenant, verdict in verdicts.items() if verdict is not None}

    def _is_accurate(self, state: TenantState) -> bool:
        cfg = self.config
        return state.accuracy.is_accurate(cfg.accuracy_min_events, cfg.accuracy_margin) is not False
