"""Persistence: npz/json round trip, no pickle, odd tenant names."""
from __future__ import annotations

import json

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import tenant_stem
from agents_trace.predict.predictor import Predictor

from .synthetic import agent_sessions

ODD_TENANT = "team/α beta:..\\x"


def build() -> Predictor:
    predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    sessions = agent_sessions(30)
    predictor.fit_sequences(ODD_TENANT, sessions, gaps=[[0.5] * len(s) for s in sessions])
    predictor.fit_sequences("cold", agent_sessions(2, seed=3, tools=("q", "r", "s")))
    predictor.refit_global()
    return predictor


def forecasts(predictor: Predictor) -> list:
    out = []
    for tenant in (ODD_TENANT, "cold", "never_seen"):
        out.append(predictor.forecast(tenant, "fresh", 0.0))
    return out


def test_persist_round_trip_reproduces_forecasts(tmp_path) -> None:
    original = build()
    original.save(tmp_path)
    loaded = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    loaded.load(tmp_path)
    assert set(loaded.tenants()) == {ODD_TENANT, "cold"}
    for a, b in zip(forecasts(original), forecasts(loaded)):
        assert a.next_step.keys() == b.next_step.keys()
        for key in a.next_step:
            assert a.next_step[key] == pytest.approx(b.next_step[key], rel=1e-12)
        assert [p for _, p in a.p_return_within] == pytest.approx(
            [p for _, p in b.p_return_within])
        assert a.confident == b.confident
    model_a, model_b = original.model_of(ODD_TENANT), loaded.model_of(ODD_TENANT)
    np.testing.assert_array_equal(model_a.hmm.trans, model_b.hmm.trans)
    assert model_a.recency == model_b.recency
    assert loaded.status(ODD_TENANT).num_learned == 30
    # The loaded tenant keeps its sessions, so it can refit without new data.
    assert loaded.refit(ODD_TENANT) is not None
    original.close()
    loaded.close()


def test_persist_files_are_plain_arrays_and_json(tmp_path) -> None:
    build().save(tmp_path)
    stem = tenant_stem(ODD_TENANT)
    meta = json.loads((tmp_path / f"{stem}.json").read_text())
    assert meta["tenant"] == ODD_TENANT
    with np.load(tmp_path / f"{stem}.npz", allow_pickle=False) as data:
        for key in data.files:
            assert data[key].dtype != object
    assert "/" not in stem and "\\" not in stem


def test_persist_load_rejects_foreign_json(tmp_path) -> None:
    (tmp_path / "t-bad.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError):
        Predictor().load(tmp_path)


def test_persist_restored_starts_empty_without_directory(tmp_path) -> None:
    predictor = Predictor.restored(tmp_path / "missing")
    assert predictor.tenants() == []
    build().save(tmp_path / "state")
    again = Predictor.restored(tmp_path / "state")
    assert ODD_TENANT in again.tenants() and again.global_model is not None


def test_persist_keeps_the_learned_abandon_odds_and_reads_files_without_them(tmp_path) -> None:
    original = build()
    for i in range(3):
        original.observe(ODD_TENANT, f"s{i}", "USER", 0.0)
        original.mark_waiting(ODD_TENANT, f"s{i}", 0.5, ("search",))
        original.observe(ODD_TENANT, f"s{i}", "END" if i else "search", 9.0)
    original.save(tmp_path)
    loaded = Predictor.restored(tmp_path, PredictorConfig(background_refits=False, min_sessions=5))
    counts = loaded._tenant(ODD_TENANT).abandons
    assert (counts.abandoned, counts.continued) == (2.0, 1.0)
    # A file written before abandons were learned loads with none counted.
    path = tmp_path / f"{tenant_stem(ODD_TENANT)}.json"
    meta = json.loads(path.read_text())
    del meta["abandons"]
    path.write_text(json.dumps(meta))
    again = Predictor.restored(tmp_path, PredictorConfig(background_refits=False, min_sessions=5))
    assert again._tenant(ODD_TENANT).abandons.num_waits == 0.0
    for predictor in (original, loaded, again):
        predictor.close()
