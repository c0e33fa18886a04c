"""Settings of the predictor (immutable; one instance per Predictor)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .gap_distributions import DurationPrior
from .fit import FitConfig
from .vocabulary import ASSISTANT_TEXT_SYMBOL


@dataclass(frozen=True, slots=True)
class PredictorConfig:
    """
    min_sessions: a tenant with fewer learned sessions is cold and uses the global model.
    background_refits: refit on the background thread when due (refit() always works).
    refit_every_sessions / refit_growth: a tenant is due for a refit after
        min(refit_every_sessions, max(min_sessions, refit_growth * sessions at its last
        fit)) newly learned sessions, so small tenants (cheap fits) refit after a few
        sessions and big ones at most every `refit_every_sessions`.
    global_refit_every_sessions: the same cap for the global class model.
    refit_cpu_share: background refits use at most this share of one core (after a fit
        that took c CPU seconds the next waits c x (1 / share - 1)); 1: no pause.
    max_fit_sessions: newest learned sessions kept per tenant (and globally) for refits.
    max_recent_sessions: sessions in the recency memory.
    max_history_steps: steps of a live session kept for re-filtering after a model swap.
    min_top1 / min_accuracy_weight: below this recent top-1 on real guesses (accuracy.py;
        with at least this much evidence) forecasts not made while tools are pending say
        `confident=False`.
    session_max_misses: a session whose own last this many real guesses (scored as the
        tenant's, tenant.py) all missed says `confident=False` for its forecasts not made
        while tools are pending, until one of its guesses hits again; 0: no such rule.
    min_tool_waits: a cold tenant's forecasts while a tool call is pending say
        `confident=True` once this many of its tool waits have ended (continued or
        abandoned): they rest on the tool's learned duration
        and the tenant's abandon odds, not on the step model, which needs `min_sessions`
        finished sessions (and a finished session is known only once it has idled out).
    silent_symbols: steps that send no request themselves (looked through, returns.py).
    session_ttl_s: live sessions idle this long are dropped without learning.
    turn_odds_strength / turn_odds_cap: P(END) after a session's k-th text answer is
        corrected per k from how often the tenant's finished sessions ended there,
        shrunk toward the step model's own with this many pseudo-sessions; answers
        past the cap are pooled; cap 0: no correction (turns.py).
    """

    fit: FitConfig = field(default_factory=FitConfig)
    min_sessions: int = 8
    background_refits: bool = True
    refit_every_sessions: int = 50
    refit_growth: float = 0.5
    global_refit_every_sessions: int = 200
    refit_cpu_share: float = 0.25
    max_fit_sessions: int = 2000
    max_recent_sessions: int = 64
    max_history_steps: int = 512
    durations: DurationPrior = field(default_factory=DurationPrior)
    horizons_s: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
    quantiles: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)
    half_life_steps: float = 200.0
    min_top1: float = 0.3
    session_max_misses: int = 3   # 2 cost the HMM rows of bench_policies up to 1.5 % TTFT
    min_tool_waits: int = 10
    min_accuracy_weight: float = 10.0
    default_recency_decay: float = 0.7
    silent_symbols: tuple[str, ...] = (ASSISTANT_TEXT_SYMBOL,)
    session_ttl_s: float = 3600.0
    turn_odds_strength: float = 10.0
    turn_odds_cap: int = 8

    def __post_init__(self) -> None:
        """Refuse a `session_max_misses` that is no whole number >= 0 (a bool included)."""
        misses = self.session_max_misses
        if type(misses) is not int or misses < 0:
            raise ValueError(f"session_max_misses must be a whole number >= 0 (0: off), "
                             f"not {misses!r}")
