"""A tenant's tool vocabulary is bounded (FI6, QA76 #3): however many distinct tool names its
clients send, a fitted model (and a cold tenant's vocabulary) names at most
`MAX_TOOL_SYMBOLS` tools, the most frequent, the rest pooled as `<other tool>`; the refit's
arrays (the n-gram table is contexts x V) stay small."""
from __future__ import annotations

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.vocabulary import (BASE_SYMBOLS, MAX_TOOL_SYMBOLS, OTHER_TOOL_SYMBOL, cap_tools,
                                             capped_sequences)

NUM_NAMES = 3200
NUM_SESSIONS = 8


def _flooded_sequences() -> list[list[str]]:
    """8 sessions, 3,200 distinct tool names (400 each), and `search` in every session."""
    per = NUM_NAMES // NUM_SESSIONS
    return [["USER", "search"] + [f"tool_{s * per + i:05d}" for i in range(per)] + ["ASSISTANT_TEXT"]
            for s in range(NUM_SESSIONS)]


def test_cap_tools_keeps_the_most_frequent_names():
    counts = {"a": 5, "b": 1, "c": 3, "d": 1}
    assert cap_tools(counts, 2) == {"b": OTHER_TOOL_SYMBOL, "d": OTHER_TOOL_SYMBOL}
    assert cap_tools(counts, 4) == {}
    assert capped_sequences([["USER", "a", "b"], ["a", "c", "END"]], 2) == [   # ties: by name
        ["USER", "a", "b"], ["a", OTHER_TOOL_SYMBOL, "END"]]


def test_a_flood_of_tool_names_fits_a_bounded_model():
    predictor = Predictor(PredictorConfig(background_refits=False))
    try:
        model = predictor.fit_sequences("t", _flooded_sequences())
        assert model is not None
        bound = MAX_TOOL_SYMBOLS + len(BASE_SYMBOLS) + 2       # + <other tool> + <oov>
        assert model.vocab.size <= bound < NUM_NAMES
        assert "search" in model.vocab.index and OTHER_TOOL_SYMBOL in model.vocab.index
        assert model.hmm.emit.shape[1] == model.ngram.probs.shape[1] == model.vocab.size
        assert model.ngram.probs.nbytes < 4 * 2**20            # was (9624, 3204): 235 MiB
        # a name past the cap is the other-tool symbol, not an unknown one, and a session
        # waiting on it is forecast to run it
        rare = "tool_03199"
        assert model.vocab.encode_one(rare) == model.vocab.index[OTHER_TOOL_SYMBOL]
        predictor.observe("t", "live", "USER", 0.0)
        predictor.mark_waiting("t", "live", 1.0, (rare,))
        forecast = predictor.forecast("t", "live", 1.0)
        assert forecast.waits_on_tool() and max(forecast.next_step, key=forecast.next_step.get) == rare
        assert OTHER_TOOL_SYMBOL not in forecast.next_step
    finally:
        predictor.close()


def test_a_cold_tenants_vocabulary_is_capped_too():
    predictor = Predictor(PredictorConfig(background_refits=False))
    try:
        for i, seq in enumerate(_flooded_sequences()[:2]):   # too few sessions to fit
            for t, symbol in enumerate(seq):
                predictor.observe("t", f"s{i}", symbol, float(t), 0.1)
            predictor.end_session("t", f"s{i}")
        assert predictor.model_of("t") is None
        forecast = predictor.forecast("t", "new", 0.0)
        assert len(forecast.next_step) <= MAX_TOOL_SYMBOLS + len(BASE_SYMBOLS) + 2
        assert "search" in forecast.next_step
    finally:
        predictor.close()
