"""A predictor's files on start (agents_trace/predict/predictor_files.py): a file is used
only for the tenant its name is for, a file that cannot be set aside loses its tenant
only, a damaged file is named as it is, and a restart rewrites nothing unchanged."""
from __future__ import annotations

import json
import logging
import shutil
from types import SimpleNamespace

from agents_trace.predict import persist
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import GLOBAL_STEM, tenant_stem
from agents_trace.predict.predictor import Predictor

from .synthetic import agent_sessions

CONFIG = PredictorConfig(background_refits=False, min_sessions=5)


def build(num_alpha: int = 12) -> Predictor:
    """alpha fitted on `num_alpha` sessions, beta fitted on 8, gamma with 2 (cold), and a global model."""
    predictor = Predictor(CONFIG)
    predictor.fit_sequences("alpha", agent_sessions(num_alpha))
    predictor.fit_sequences("beta", agent_sessions(8, seed=1))
    predictor.fit_sequences("gamma", agent_sessions(2, seed=2, tools=("q", "r", "s")))
    predictor.refit_global()
    return predictor


def counting_writes(monkeypatch) -> list[str]:
    stems: list[str] = []
    real = persist.write

    def write(directory, stem, meta, arrays):
        stems.append(stem)
        real(directory, stem, meta, arrays)

    monkeypatch.setattr(persist, "write", write)
    return stems


def refusing_renames(monkeypatch) -> None:
    """As in a read-only directory: setting a file aside is refused (root ignores
    permission bits, so the refusal is simulated)."""
    from cache import damaged_files

    def refuse(source, target):
        raise PermissionError(1, "Operation not permitted", str(source), None, str(target))

    monkeypatch.setattr(damaged_files, "os", SimpleNamespace(replace=refuse))


def test_another_tenants_file_under_a_tenants_name_is_set_aside_and_replaces_no_one(tmp_path, caplog) -> None:
    """An older checkpoint of alpha copied to gamma's names replaced alpha's fitted state
    (the later file in sort order won), dropped gamma, and was saved over alpha's good file."""
    with Predictor(CONFIG) as old:
        old.fit_sequences("alpha", agent_sessions(1))
        old.save(tmp_path / "old")
    with build() as predictor:
        predictor.save(tmp_path)
    alpha_json = (tmp_path / f"{tenant_stem('alpha')}.json").read_text()
    for suffix in (".json", ".npz"):
        shutil.copy(tmp_path / "old" / f"{tenant_stem('alpha')}{suffix}", tmp_path / f"{tenant_stem('gamma')}{suffix}")
    with caplog.at_level(logging.WARNING, logger="stepahead"), Predictor.restored(tmp_path, CONFIG) as restored:
        assert restored.tenants() == ["alpha", "beta"]
        assert restored.status("alpha").num_learned == 12 and restored.model_of("alpha") is not None
        restored.save(tmp_path)
    gamma = tmp_path / f"{tenant_stem('gamma')}.json"
    assert not gamma.exists() and len(list(tmp_path.glob(f"{gamma.name}.damaged-*"))) == 1
    assert len(list(tmp_path.glob(f"{tenant_stem('gamma')}.npz.damaged-*"))) == 1
    assert f"{gamma} holds tenant 'alpha', not the one its name is for; moved it to" in caplog.text
    assert (tmp_path / f"{tenant_stem('alpha')}.json").read_text() == alpha_json


def test_a_damaged_file_that_cannot_be_set_aside_loses_its_tenant_only(tmp_path, caplog, monkeypatch) -> None:
    """A read-only directory and one damaged file: setting it aside fails, which threw
    away every tenant (with a traceback). Now it is one warning line, that tenant starts
    anew, and no save writes over its file."""
    with build() as predictor:
        predictor.save(tmp_path)
    beta = tmp_path / f"{tenant_stem('beta')}.json"
    beta.write_text(beta.read_text()[:50])
    refusing_renames(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="stepahead"), Predictor.restored(tmp_path, CONFIG) as restored:
        assert restored.tenants() == ["alpha", "gamma"] and restored.global_model is not None
        assert restored.model_of("alpha") is not None and restored.status("gamma").num_learned == 2
        [record] = caplog.records
        assert record.exc_info is None and "\n" not in record.getMessage()
        assert f"{beta} could not be read (JSONDecodeError: " in record.getMessage()
        assert "could not be set aside either (PermissionError: " in record.getMessage()
        restored.observe("beta", "s", "USER", 1.0)
        restored.end_session("beta", "s")   # beta learns anew...
        restored.save(tmp_path)
    assert len(beta.read_text()) == 50       # ...but its file is not written over


def test_a_garbage_npz_is_named_and_never_with_advice_to_unpickle_it(tmp_path, caplog) -> None:
    with build() as predictor:
        predictor.save(tmp_path)
    npz = tmp_path / f"{tenant_stem('beta')}.npz"
    npz.write_bytes(bytes(range(256)) * 12)
    with caplog.at_level(logging.WARNING, logger="stepahead"), Predictor.restored(tmp_path, CONFIG) as restored:
        assert restored.tenants() == ["alpha", "gamma"]
    [record] = caplog.records
    message = record.getMessage()
    assert message.startswith(f"stepahead: warning: the predictor's saved state {npz} could not be read (not an npz file")
    assert "allow_pickle" not in message and "pickle.load" not in message and "trust" not in message
    assert "(not an npz file of plain arrays: it is not a zip archive)" in message and "pickled" not in message
    assert not npz.exists() and not npz.with_suffix(".json").exists()
    assert len(list(tmp_path.glob("*.damaged-*"))) == 2


def test_a_restored_predictor_writes_nothing_at_its_first_save(tmp_path, monkeypatch) -> None:
    """What was just read is what the files hold: after a restart only tenants that
    changed since are written (an idle tenant's file is not rewritten at every restart)."""
    with build() as predictor:
        predictor.save(tmp_path)
    stems = counting_writes(monkeypatch)
    with Predictor.restored(tmp_path, CONFIG) as restored:
        restored.save(tmp_path)
        assert stems == []
        restored.observe("beta", "s", "USER", 1.0, gap_s=0.5)
        restored.save(tmp_path)
        assert stems == [tenant_stem("beta")]
        stems.clear()
        restored.save(tmp_path / "elsewhere")
        assert sorted(stems) == sorted([tenant_stem(t) for t in ("alpha", "beta", "gamma")] + [GLOBAL_STEM])


def test_a_file_saved_before_a_part_was_kept_is_written_again_with_it(tmp_path, monkeypatch) -> None:
    with build() as predictor:
        predictor.save(tmp_path)
    path = tmp_path / f"{tenant_stem('alpha')}.json"
    meta = json.loads(path.read_text())
    assert set(meta) == persist.TENANT_KEYS and persist.is_current(meta)   # what a save writes now
    del meta["turn_offsets"]
    path.write_text(json.dumps(meta))
    stems = counting_writes(monkeypatch)
    with Predictor.restored(tmp_path, CONFIG) as restored:
        restored.save(tmp_path)
    assert stems == [tenant_stem("alpha")] and "turn_offsets" in json.loads(path.read_text())


def test_a_restart_fits_the_sessions_its_last_stop_learned_unfitted(tmp_path):
    """QA215 F1: sessions a gateway learned at its stop were saved with no model fitted,
    and the restart fitted none until one of the tenant's sessions ended (15 min and more
    with the default idle timeout): the restore now asks for the fit that is due."""
    learning = Predictor(CONFIG)   # no background refits: learned, never fitted, as at a stop
    for index, steps in enumerate(agent_sessions(8)):
        for t_s, symbol in enumerate(steps):
            learning.observe("alpha", f"s{index}", symbol, float(t_s))
        learning.end_session("alpha", f"s{index}")
    assert learning.model_of("alpha") is None and learning.status("alpha").num_learned == 8
    learning.save(tmp_path)
    learning.close()
    restored = Predictor.restored(tmp_path, PredictorConfig(min_sessions=5))
    try:
        assert restored.wait_for_refits(30.0)
        assert restored.model_of("alpha") is not None
        assert restored.request_due_refits() == []   # fitted: nothing due any more
    finally:
        restored.close()
    unfitted = Predictor.restored(tmp_path, CONFIG)   # refits left to the caller (replays): none asked for
    assert unfitted.request_due_refits() == [] and unfitted.model_of("alpha") is None
    unfitted.close()
