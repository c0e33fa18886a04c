"""Cold start: a tenant without enough sessions borrows the global model.

The global model is fitted on every tenant's sessions reduced to step *classes*
(`USER`, `ASSISTANT_TEXT`, `TOOL`, `END`, see `step_class`). It knows the shape of agent
sessions (how many tool calls per turn, when they end) but no tool names, so no tenant's
tool names ever appear in another tenant's forecast. A cold tenant's `TOOL` mass is split
over the tools *it* has used so far, in proportion to their counts, with one extra count
for "a tool it has not used yet" (the OOV bucket), like a Chinese-restaurant process.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .step_model import TOOL_CLASS
from .vocabulary import BASE_SYMBOLS, OOV_SYMBOL, Vocabulary

NEW_TOOL_COUNT = 1.0


def tool_shares(vocab: Vocabulary, tool_counts: Mapping[str, int]) -> np.ndarray:
    """P(tool | a tool is called) over `vocab`; zero on base symbols, OOV gets the
    new-tool share."""
    shares = np.zeros(vocab.size)
    for symbol, count in tool_counts.items():
        if symbol in vocab.index and symbol not in BASE_SYMBOLS:
            shares[vocab.index[symbol]] += count
    shares[vocab.oov_id] += NEW_TOOL_COUNT
    return shares / shares.sum()


def expand(class_probs: np.ndarray, class_vocab: Vocabulary, vocab: Vocabulary,
           shares: np.ndarray) -> np.ndarray:
    """A class-level next-step distribution as a distribution over the tenant's `vocab`."""
    tool_id = class_vocab.index.get(TOOL_CLASS)
    out = shares * (0.0 if tool_id is None else class_probs[tool_id])
    for symbol in BASE_SYMBOLS:
        out[vocab.index[symbol]] += class_probs[class_vocab.index[symbol]]
    out[vocab.oov_id] += class_probs[class_vocab.index[OOV_SYMBOL]]
    return out / out.sum()
