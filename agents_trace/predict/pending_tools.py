"""The next step when the response asked for tools: known, unless the session is abandoned.

A response that ends in tool calls names the session's next steps: the client runs those
tools and sends their results, which is the next request. The step model alone cannot
see this (its symbols are the steps that happened, not what a response asked for), so
after a tool-calling response it spreads its forecast over every tool, a text answer and
END. Here the forecast is instead: the first tool asked for with probability
1 - P(abandon), END with P(abandon), and the return after that tool's learned duration.

P(abandon) is learned per tenant from how such waits ended (`AbandonCounts`): a Beta
posterior mean, starting from `PRIOR_ABANDONED` of `PRIOR_WAITS` pseudo-waits (clients
almost always send tool results back; a tenant whose agents often drop them learns it).

Invariant: the distribution sums to 1 over the tenant's vocabulary; a tool the
vocabulary does not know (new since the last fit, or past the tool cap) gets the id it
encodes to (`<oov>` or `<other tool>`), and the forecast (predictor.py) gives that id the
tool's own learned duration (`DurationModel.table_with`), the tenant's overall one only
while the tool has no gaps of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cache.forecast import END_SYMBOL

from .vocabulary import Vocabulary

PRIOR_ABANDONED = 0.5
PRIOR_WAITS = 10.0


@dataclass(slots=True)
class AbandonCounts:
    """How a tenant's waits after tool-calling responses ended: with END (abandoned) or
    with a next step (continued)."""

    abandoned: float = 0.0
    continued: float = 0.0

    def record(self, symbol: str) -> None:
        if symbol == END_SYMBOL:
            self.abandoned += 1.0
        else:
            self.continued += 1.0

    @property
    def num_waits(self) -> float:
        return self.abandoned + self.continued

    def p_abandon(self) -> float:
        return (PRIOR_ABANDONED + self.abandoned) / (PRIOR_WAITS + self.num_waits)


def pending_distribution(vocab: Vocabulary, tool: str, p_abandon: float) -> np.ndarray:
    """Next-step distribution over `vocab` when the response asked for `tool` first."""
    p = np.zeros(vocab.size, dtype=np.float64)
    p[vocab.encode_one(tool)] = 1.0 - p_abandon
    p[vocab.end_id] += p_abandon
    return p
