"""A saved predictor pair holding a non-finite number (NaN or infinity, in an array or the
JSON, with a matching digest) is damaged (FI6, QA76 #4): set aside with the one-line warning,
its tenant starts anew, the others load; and NaN is never written into the JSON."""
from __future__ import annotations

import hashlib
import io
import json
import logging
import math

import numpy as np
import pytest

from agents_trace.predict import persist
from agents_trace.predict.accuracy import AccuracyTracker
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import tenant_stem
from agents_trace.predict.predictor import Predictor

CONFIG = PredictorConfig(background_refits=False, min_sessions=5)
SESSION = ["USER", "search", "fetch", "ASSISTANT_TEXT"]


def _saved(directory) -> None:
    with Predictor(CONFIG) as predictor:
        predictor.fit_sequences("alpha", [SESSION] * 10)
        predictor.fit_sequences("beta", [SESSION] * 6)
        predictor.save(directory)


def _rewrite(directory, tenant: str, *, array: str | None = None, logloss: float | None = None) -> None:
    """The tenant's pair with `array` set to NaN and/or the JSON's accuracy log-loss set,
    the digest made to match (a pair every other check of `persist.read` passes)."""
    json_path = directory / f"{tenant_stem(tenant)}.json"
    meta = json.loads(json_path.read_text())
    with np.load(json_path.with_suffix(".npz")) as npz:
        arrays = {k: np.array(npz[k]) for k in npz.files}
    if array is not None:
        arrays[array] = np.full_like(arrays[array], np.nan)
    if logloss is not None:
        meta["accuracy"]["logloss"] = logloss
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    json_path.with_suffix(".npz").write_bytes(buffer.getvalue())
    meta[persist.ARRAYS_DIGEST] = hashlib.sha256(buffer.getvalue()).hexdigest()
    json_path.write_text(json.dumps(meta))   # json writes NaN / Infinity as it is told


@pytest.mark.parametrize("damage", [{"array": "hmm_trans"}, {"array": "durations_stats"},
                                    {"logloss": float("nan")}, {"logloss": float("inf")}])
def test_a_pair_with_a_non_finite_number_is_set_aside(tmp_path, caplog, damage):
    _saved(tmp_path)
    _rewrite(tmp_path, "alpha", **damage)
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        with Predictor.restored(tmp_path, CONFIG) as predictor:
            assert predictor.tenants() == ["beta"] and predictor.model_of("beta") is not None
    stem = tenant_stem("alpha")
    assert not (tmp_path / f"{stem}.json").exists()
    assert len(list(tmp_path.glob(f"{stem}.json.damaged-*"))) == 1
    assert len(list(tmp_path.glob(f"{stem}.npz.damaged-*"))) == 1
    lines = [r.getMessage() for r in caplog.records if "moved it to" in r.getMessage()]
    assert len(lines) == 1 and "non-finite" in lines[0]


def test_nan_is_never_written_into_the_json(tmp_path):
    with pytest.raises(ValueError):
        persist.write(tmp_path, "x", {"accuracy": {"logloss": float("nan")}}, {"a": np.zeros(2)})
    assert not list(tmp_path.glob("x.*"))   # neither file of the pair replaced
    tracker = AccuracyTracker()
    tracker.record(float("nan"), False)
    assert math.isfinite(tracker.logloss) and tracker.logloss > 0
