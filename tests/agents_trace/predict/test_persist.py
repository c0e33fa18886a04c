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


def test_a_save_writes_only_what_changed_since_the_last_one(tmp_path, monkeypatch) -> None:
    from agents_trace.predict.persist import GLOBAL_STEM

    predictor = build()
    from tests.agents_trace.predict.test_predictor_files import counting_writes

    stems = counting_writes(monkeypatch)
    predictor.save(tmp_path)
    assert sorted(stems) == sorted([tenant_stem(ODD_TENANT), tenant_stem("cold"), GLOBAL_STEM])
    stems.clear()
    forecasts(predictor)                    # forecasts change nothing a checkpoint keeps...
    predictor.status("cold")
    predictor.save(tmp_path)
    assert stems == [tenant_stem("never_seen")]   # ...but the tenant a forecast met is new
    stems.clear()
    predictor.observe("cold", "s1", "q", 10.0, gap_s=1.5)   # accuracy and durations move
    predictor.save(tmp_path)
    assert stems == [tenant_stem("cold")]
    stems.clear()
    predictor.save(tmp_path / "elsewhere")   # another directory has none of them yet
    assert len(stems) == 4
    stems.clear()
    predictor.observe("cold", "s1", "END", 11.0)   # the session ends and is learned: global too
    (tmp_path / f"{tenant_stem(ODD_TENANT)}.json").unlink()   # a file gone is written again
    predictor.save(tmp_path)
    assert sorted(stems) == sorted([tenant_stem("cold"), tenant_stem(ODD_TENANT), GLOBAL_STEM])
    loaded = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    loaded.load(tmp_path)
    assert loaded.status("cold").num_learned == predictor.status("cold").num_learned == 3
    assert loaded.status(ODD_TENANT).num_learned == 30
    stems.clear()
    loaded.save(tmp_path)                    # what was just read is what the files hold
    assert stems == []
    loaded.save(tmp_path / "other")          # but another directory has none of it
    assert len(stems) == 4
    stems.clear()
    loaded.observe("cold", "s2", "q", 20.0, gap_s=1.0)
    loaded.save(tmp_path)
    assert stems == [tenant_stem("cold")]
    predictor.close()
    loaded.close()


def test_every_change_a_checkpoint_keeps_counts_and_a_forecast_does_not() -> None:
    predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    state = predictor._tenant("t")
    changes = [state.num_changes]
    predictor.fit_sequences("t", agent_sessions(6))          # learned sessions, then a refit
    changes.append(state.num_changes)
    predictor.observe("t", "s", "search", 1.0, gap_s=0.4)
    changes.append(state.num_changes)
    predictor.mark_waiting("t", "s", 1.5)
    predictor.forecast("t", "s", 2.0)
    changes.append(state.num_changes)
    predictor.end_session("t", "s")
    changes.append(state.num_changes)
    predictor.remember("t", ["search", "END"])
    changes.append(state.num_changes)
    assert changes[1] >= changes[0] + 7        # 6 sessions learned + the model installed
    assert changes[2] == changes[1] + 1 and changes[3] == changes[2]
    assert changes[4] == changes[3] + 1 and changes[5] == changes[4] + 1
    predictor.close()


def test_restored_sets_a_damaged_file_aside_and_keeps_the_other_tenants(tmp_path, caplog) -> None:
    """One unreadable file must not make every tenant start cold for good (the save
    writes only what changed, so the damaged file would stay and fail every start)."""
    build().save(tmp_path)
    stem = tenant_stem("cold")
    (tmp_path / f"{stem}.json").write_text('{"format": "stepahead-pre')   # cut short
    restored = Predictor.restored(tmp_path)
    assert restored.tenants() == [ODD_TENANT] and restored.global_model is not None
    assert restored.status(ODD_TENANT).num_learned == 30
    assert not (tmp_path / f"{stem}.json").exists() and not (tmp_path / f"{stem}.npz").exists()
    assert len(list(tmp_path.glob(f"{stem}.json.damaged-*"))) == 1
    assert len(list(tmp_path.glob(f"{stem}.npz.damaged-*"))) == 1
    assert "the predictor's saved state" in caplog.text and "JSONDecodeError" in caplog.text
    restored.close()


def test_restored_sets_aside_a_damaged_global_model_and_keeps_the_tenants(tmp_path) -> None:
    build().save(tmp_path)
    (tmp_path / "_global.npz").write_bytes(b"PK\x03\x04 not a zip")
    restored = Predictor.restored(tmp_path)
    assert set(restored.tenants()) == {ODD_TENANT, "cold"} and restored.global_model is None
    assert len(list(tmp_path.glob("_global.json.damaged-*"))) == 1
    restored.close()
