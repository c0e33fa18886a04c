"""A saved predictor pair whose digest matches but which holds a value no fit or learning
makes (QA188 F4: a vocabulary without END, all-zero emissions, negative weights or counts)
is damaged: set aside with the one-line warning, its tenant starts anew, the others load."""
from __future__ import annotations

import hashlib
import io
import json
import logging

import numpy as np
import pytest

from agents_trace.predict import persist
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import tenant_stem
from agents_trace.predict.predictor import Predictor

CONFIG = PredictorConfig(background_refits=False, min_sessions=5)
SESSION = ["USER", "search", "fetch", "ASSISTANT_TEXT"]


def _no_end(meta, arrays):
    vocab = meta["model"]["vocab"]
    vocab[vocab.index("END")] = "search2"


def _zero_emissions(meta, arrays):
    arrays["hmm_emit"] = np.zeros_like(arrays["hmm_emit"])


def _negative_ngram(meta, arrays):
    arrays["ngram_probs"] = -arrays["ngram_probs"]


def _negative_weights(meta, arrays):
    meta["model"]["weights"] = [-1.0, 1.5, 0.5]


def _negative_learned(meta, arrays):
    meta["num_learned"] = -1000


def _fit_after_learned(meta, arrays):
    meta["num_learned_at_fit"] = 10 ** 9


def _huge_tool_count(meta, arrays):
    meta["tool_counts"] = {"search": 10 ** 30}


def _negative_accuracy(meta, arrays):
    meta["accuracy"]["weight"] = -5.0


def _top1_past_one(meta, arrays):
    meta["model"]["report"]["val_top1"] = 5.0


def _negative_gaps(meta, arrays):
    arrays["durations_stats"] = -np.abs(arrays["durations_stats"]) * 1e6


CASES = [_no_end, _zero_emissions, _negative_ngram, _negative_weights, _negative_learned,
         _fit_after_learned, _huge_tool_count, _negative_accuracy, _top1_past_one, _negative_gaps]


def _saved(directory) -> None:
    with Predictor(CONFIG) as predictor:
        predictor.fit_sequences("alpha", [SESSION] * 10, [[1.0, 2.0, 3.0, 4.0]] * 10)
        predictor.fit_sequences("beta", [SESSION] * 6)
        predictor.save(directory)


def _rewrite(directory, tenant: str, mutate) -> None:
    """The tenant's pair changed by `mutate`, its digest made to match."""
    json_path = directory / f"{tenant_stem(tenant)}.json"
    meta = json.loads(json_path.read_text())
    with np.load(json_path.with_suffix(".npz")) as npz:
        arrays = {k: np.array(npz[k]) for k in npz.files}
    mutate(meta, arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    json_path.with_suffix(".npz").write_bytes(buffer.getvalue())
    meta[persist.ARRAYS_DIGEST] = hashlib.sha256(buffer.getvalue()).hexdigest()
    json_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("mutate", CASES, ids=[c.__name__ for c in CASES])
def test_a_pair_no_learning_makes_is_set_aside(tmp_path, caplog, mutate):
    _saved(tmp_path)
    _rewrite(tmp_path, "alpha", mutate)
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        with Predictor.restored(tmp_path, CONFIG) as predictor:
            assert predictor.tenants() == ["beta"] and predictor.model_of("beta") is not None
    stem = tenant_stem("alpha")
    assert not (tmp_path / f"{stem}.json").exists()
    assert len(list(tmp_path.glob(f"{stem}.*.damaged-*"))) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no learning makes" in warnings[0], warnings


def test_pairs_learning_made_still_load(tmp_path, caplog):
    _saved(tmp_path)
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        with Predictor.restored(tmp_path, CONFIG) as predictor:
            assert predictor.tenants() == ["alpha", "beta"]
            assert predictor.model_of("alpha") is not None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
