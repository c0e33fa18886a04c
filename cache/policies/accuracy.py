"""Is a tenant's forecast worth following? Recent Brier score against its base rate.

Each forecast predicts P(the session returns within the HOT horizon); the outcome is
known when the session comes back or the horizon passes. A tenant's forecasts are
*inaccurate* when their recent (exponentially weighted) Brier score exceeds, by more
than `margin`, that of always predicting the tenant's recent return rate; until
`min_events` outcomes are in, the forecast's own `confident` flag decides.

NOTE: the margin is absolute, not relative: when nearly every session comes back the
base rate's score is ~0, and a slightly cautious forecast (0.9 for a sure return) must
not count as broken; a broken one (0.1 for a sure return) is off by ~0.8.

Invariant: scores are EWMAs with weight `alpha` per outcome, so the verdict follows the
last ~1/alpha outcomes and recovers when forecasts improve.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TenantAccuracy:
    num_events: int = 0
    brier: float = 0.0
    base_brier: float = 0.0
    base_rate: float = 0.5

    def add(self, predicted_p: float, returned: bool, alpha: float) -> None:
        y = 1.0 if returned else 0.0
        keep = 1.0 - alpha
        self.brier = keep * self.brier + alpha * (predicted_p - y) ** 2
        self.base_brier = keep * self.base_brier + alpha * (self.base_rate - y) ** 2
        self.base_rate = keep * self.base_rate + alpha * y
        self.num_events += 1

    def is_accurate(self, min_events: int, margin: float) -> bool | None:
        """True/False once `min_events` outcomes are in; None before."""
        if self.num_events < min_events:
            return None
        return self.brier <= self.base_brier + margin
