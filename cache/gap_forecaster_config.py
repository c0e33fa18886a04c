"""The gap forecaster's priors and knobs (cache/gap_forecaster.py), chosen once, not per trace."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GapForecasterConfig:
    """Priors and knobs (chosen once, not per trace).

    `strength` / `return_strength` / `session_strength`: pseudo-observations each
    level borrows from its parent, for gaps, return odds and a session's own gaps.
    Return odds shrink harder: split by depth and prompt size they are informative on
    conversation traces, noise where sessions end at random. `answers_cap` 0 leaves
    the number of text answers out. `max_steps_per_tenant` bounds the distinct waits
    (tool-call combinations) a tenant's statistics are kept for, whatever tool names its
    clients send; later new ones pool as `OTHER_STEP`.
    """

    prior_median_s: float = 10.0
    prior_sigma: float = 1.5
    prior_p_return: float = 0.5
    strength: float = 3.0
    return_strength: float = 10.0
    session_strength: float = 3.0
    expire_quantile: float = 0.99
    use_prompt_size: bool = True
    answers_cap: int = 8
    min_outcomes: int = 20
    recount_every: int = 128
    max_sessions: int = 200_000
    max_steps_per_tenant: int = 256
    quantiles: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
