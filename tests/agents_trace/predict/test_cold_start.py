"""Cold start: class distributions spread over the tenant's own tools only."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.cold_start import expand, tool_shares
from agents_trace.predict.step_model import TOOL_CLASS
from agents_trace.predict.vocabulary import Vocabulary


def test_expand_spreads_tool_mass_over_own_tools() -> None:
    classes = Vocabulary.from_symbols([TOOL_CLASS])
    class_probs = np.zeros(classes.size)
    class_probs[classes.index[TOOL_CLASS]] = 0.8
    class_probs[classes.index["END"]] = 0.2
    vocab = Vocabulary.from_symbols(["ls", "cd"])
    shares = tool_shares(vocab, {"ls": 3, "cd": 1, "foreign_tool": 50})
    out = expand(class_probs, classes, vocab, shares)
    assert out.sum() == pytest.approx(1.0)
    assert out[vocab.index["END"]] == pytest.approx(0.2)
    # 3 : 1 : 1 (ls : cd : a new tool); a tool outside the vocabulary gets nothing.
    assert out[vocab.index["ls"]] == pytest.approx(0.8 * 3 / 5)
    assert out[vocab.index["cd"]] == pytest.approx(0.8 * 1 / 5)
    assert out[vocab.oov_id] == pytest.approx(0.8 * 1 / 5)
    assert "foreign_tool" not in vocab.index


def test_tool_shares_without_tools_go_to_oov() -> None:
    vocab = Vocabulary.from_symbols([])
    shares = tool_shares(vocab, {})
    assert shares[vocab.oov_id] == 1.0
