"""The predictor's own recent next-step accuracy for one tenant: its trust.

The tenant scores here only the steps that end a real guess (tenant.py): those of a
session already seen that come while it waits on no tool its last response asked for
(after a text answer: the user's next turn or END; after a reply that asked for no tool).
A session's first step, a silent step (a text answer) and the steps after a tool-calling
reply (it named them) are not scored: they are right without any guessing, and kept
`recent_top1` near 0.8 while every forecast after an answer was wrong (QA160). Each is
scored against the forecast that was current just before it (top-1 hit, log-loss); both
are exponentially weighted with a half-life in scored steps, so the numbers describe the
recent past. A fresh fit seeds the tracker with its validation accuracy (worth at most
`half_life_steps` scored steps), so a new model is judged by held-out data until live
guesses take over.

Invariant: `weight` is the effective number of scored steps behind the averages
(0 = nothing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class AccuracyTracker:
    half_life_steps: float = 200.0
    top1: float = 0.0
    logloss: float = 0.0
    weight: float = 0.0
    num_scored: int = 0

    def seed(self, top1: float, logloss: float, weight: float) -> None:
        self.top1, self.logloss = top1, logloss
        self.weight = min(weight, self.half_life_steps)

    def record(self, p_observed: float, was_top1: bool) -> None:
        keep = 0.5 ** (1.0 / self.half_life_steps) * self.weight
        new_weight = keep + 1.0
        # A NaN probability (never from a finite model) scores as the floor, not as NaN.
        loss = -math.log(p_observed if p_observed > 1e-12 else 1e-12)
        self.top1 = (keep * self.top1 + float(was_top1)) / new_weight
        self.logloss = (keep * self.logloss + loss) / new_weight
        self.weight = new_weight
        self.num_scored += 1

    def is_accurate(self, min_top1: float, min_weight: float) -> bool:
        """True when there is enough recent evidence and top-1 is at least `min_top1`."""
        return self.weight >= min_weight and self.top1 >= min_top1
