"""A saved pair (agents_trace/predict/persist.py) is used only when its json and npz come
from one save: a gateway killed between the two renames of `persist.write` left the new
arrays beside the old JSON, which loaded as a fitted model that failed at every step,
never refit, and was saved back at every shutdown."""
from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from agents_trace.predict import persist
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import tenant_stem
from agents_trace.predict.predictor import Predictor

CONFIG = PredictorConfig(background_refits=False, min_sessions=5)
OLD_SESSION = ["USER", "search", "fetch", "ASSISTANT_TEXT"]
NEW_SESSION = ["USER", "search", "compute", "fetch", "ASSISTANT_TEXT"]   # a new tool


def crashed_pair(directory, *, digest: bool = True):
    """alpha saved twice by the real save, its vocabulary grown in between, then the first
    save's JSON put back beside the second save's npz (as a kill between the renames
    leaves them); without `digest`, the JSON as the code before the digest wrote it. The
    paths of the pair, and beta's (a good pair beside it)."""
    stem = tenant_stem("alpha")
    with Predictor(CONFIG) as predictor:
        predictor.fit_sequences("beta", [OLD_SESSION] * 6)
        predictor.fit_sequences("alpha", [OLD_SESSION] * 10)
        predictor.save(directory)
        old_json = (directory / f"{stem}.json").read_text()
        predictor.fit_sequences("alpha", [NEW_SESSION] * 10)
        predictor.save(directory)
    meta = json.loads(old_json)
    if not digest:
        del meta[persist.ARRAYS_DIGEST]
    json_path = directory / f"{stem}.json"
    json_path.write_text(json.dumps(meta))
    return json_path, json_path.with_suffix(".npz")


def learn(predictor: Predictor, num_sessions: int) -> None:
    """Sessions of the grown vocabulary, step by step as a served tenant takes them, each
    step forecast (what raised on every step of the broken model)."""
    for i in range(num_sessions):
        session = f"s{i}"
        for j, symbol in enumerate(NEW_SESSION):
            predictor.observe("alpha", session, symbol, float(j), gap_s=0.5)
            predictor.forecast("alpha", session, float(j) + 0.1)
        predictor.end_session("alpha", session)
        predictor.refit_if_due("alpha")


@pytest.mark.parametrize("digest", [True, False], ids=["digest", "saved-before-the-digest"])
def test_a_pair_from_two_saves_is_set_aside_and_its_tenant_learns_anew(tmp_path, caplog, digest) -> None:
    json_path, npz_path = crashed_pair(tmp_path, digest=digest)
    with caplog.at_level(logging.WARNING, logger="stepahead"), Predictor.restored(tmp_path, CONFIG) as restored:
        assert restored.tenants() == ["beta"] and restored.model_of("beta") is not None
        [record] = caplog.records
        message = record.getMessage()
        assert f"{json_path} and {npz_path.name} are not from the same save (" in message
        assert ("digest" in message) if digest else ("hmm_emit has shape" in message)
        assert record.exc_info is None and "\n" not in message
        assert not json_path.exists() and not npz_path.exists()
        assert len(list(tmp_path.glob(f"{json_path.name}.damaged-*"))) == 1
        assert len(list(tmp_path.glob(f"{npz_path.name}.damaged-*"))) == 1
        learn(restored, 6)
        model = restored.model_of("alpha")
        assert model is not None and model.vocab.contains("compute")
        assert restored.status("alpha").num_learned == 6
        forecast = restored.forecast("alpha", "next", 0.0)
        assert sum(forecast.next_step.values()) == pytest.approx(1.0)
        restored.save(tmp_path)
    with Predictor(CONFIG) as again:   # what it saved is one pair, loaded without complaint
        again.load(tmp_path)
        assert again.status("alpha").num_learned == 6 and again.model_of("alpha") is not None


def test_without_a_handler_a_pair_from_two_saves_raises_naming_it(tmp_path) -> None:
    json_path, _ = crashed_pair(tmp_path)
    with Predictor(CONFIG) as predictor, pytest.raises(persist.UnusableFileError) as caught:
        predictor.load(tmp_path)
    assert caught.value.path == json_path


def test_a_pair_saved_before_the_digest_loads_when_its_arrays_fit_and_gets_it_at_the_next_save(tmp_path) -> None:
    with Predictor(CONFIG) as predictor:
        predictor.fit_sequences("alpha", [NEW_SESSION] * 8)
        predictor.refit_global()
        predictor.save(tmp_path)
        expected = predictor.forecast("alpha", "s", 0.0).next_step
    paths = [tmp_path / f"{tenant_stem('alpha')}.json", tmp_path / f"{persist.GLOBAL_STEM}.json"]
    for path in paths:
        meta = json.loads(path.read_text())
        del meta[persist.ARRAYS_DIGEST]
        path.write_text(json.dumps(meta))
    with Predictor.restored(tmp_path, CONFIG) as restored:
        assert restored.tenants() == ["alpha"] and restored.global_model is not None
        got = restored.forecast("alpha", "s", 0.0).next_step
        assert got.keys() == expected.keys()
        assert list(got.values()) == pytest.approx(list(expected.values()), rel=1e-12)
        restored.save(tmp_path)
    assert not list(tmp_path.glob("*.damaged-*"))
    assert all(persist.ARRAYS_DIGEST in json.loads(path.read_text()) for path in paths)


def test_durations_of_another_save_do_not_fit_the_json(tmp_path) -> None:
    """A cold tenant (no model): its duration rows must still match the JSON's symbols."""
    with Predictor(CONFIG) as predictor:
        predictor.observe("alpha", "s", "USER", 0.0, gap_s=1.0)
        predictor.end_session("alpha", "s")
        predictor.save(tmp_path / "old")
        for j, symbol in enumerate(NEW_SESSION):
            predictor.observe("alpha", "t", symbol, float(j), gap_s=1.0)
        predictor.end_session("alpha", "t")
        predictor.save(tmp_path)
    stem = tenant_stem("alpha")
    shutil.copy(tmp_path / "old" / f"{stem}.json", tmp_path / f"{stem}.json")
    meta = json.loads((tmp_path / f"{stem}.json").read_text())
    del meta[persist.ARRAYS_DIGEST]
    (tmp_path / f"{stem}.json").write_text(json.dumps(meta))
    with np.load(tmp_path / f"{stem}.npz") as data:
        assert data["durations_stats"].shape[0] > len(meta["durations_symbols"])
    with pytest.raises(persist.UnusableFileError, match="durations_stats has shape"):
        persist.read(tmp_path / f"{stem}.json")
