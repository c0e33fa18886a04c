"""The relay's gap files on restart (gateway/forecasting.py `restore_gaps`): a damaged
global file loses the all-tenant level only, never the tenants' good files."""
from __future__ import annotations

import logging

import pytest

from tests.cache.test_gap_files import make_global_unusable
from tests.gateway.test_forecasting import feed_two_answer_sessions

TENANTS = ("alpha", "beta", "gamma")


@pytest.mark.parametrize("how", ["garbage", "other features", "a directory"])
def test_a_damaged_global_gaps_file_loses_the_all_tenant_level_only(tmp_path, caplog, how):
    """Was: garbage left every tenant cold and the next save wrote alpha's file over with
    what it learned since; other return features set every good tenant file aside, then
    a traceback; a directory, a traceback and every later save failing."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from cache.gap_files import GLOBAL_FILE
    from cache.gap_memory import read_gaps
    from cache.tenant_files import tenant_file_stem
    from gateway.forecasting import GAPS_DIR, ForecastRelay

    gaps = tmp_path / GAPS_DIR
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        for tenant in TENANTS:
            feed_two_answer_sessions(relay, range(12), tenant=tenant)
        relay.save(tmp_path)
        before = {tenant: relay.gaps.num_resolved(tenant) for tenant in TENANTS}
        assert all(resolved >= 20 for resolved in before.values())
        alpha_file, beta_file = (gaps / f"{tenant_file_stem(t)}.json" for t in ("alpha", "beta"))
        alpha_returns = read_gaps(alpha_file).returns[("alpha",)].num_returned
        beta_inode = beta_file.stat().st_ino
        make_global_unusable(gaps, how)
        restored = ForecastRelay(predictor, {})
        with caplog.at_level(logging.WARNING):
            restored.restore_gaps(tmp_path)
        assert {tenant: restored.gaps.num_resolved(tenant) for tenant in TENANTS} == before
        [record] = caplog.records
        assert record.exc_info is None and f"the gap statistics {gaps / GLOBAL_FILE} " in record.getMessage()
        [aside] = [p.name for p in gaps.iterdir() if ".damaged-" in p.name]   # no tenant's file
        assert aside.startswith(f"{GLOBAL_FILE}.damaged-")
        feed_two_answer_sessions(restored, range(20, 22), tenant="alpha")
        restored.save(tmp_path)
        assert read_gaps(alpha_file).returns[("alpha",)].num_returned == alpha_returns + 2   # grew, not replaced
        assert beta_file.stat().st_ino == beta_inode   # unchanged: not written again
        assert (gaps / GLOBAL_FILE).is_file()          # a new global file
        again = ForecastRelay(predictor, {})
        again.restore_gaps(tmp_path)
        assert {t: again.gaps.num_resolved(t) for t in TENANTS} == {t: restored.gaps.num_resolved(t) for t in TENANTS}
        assert again.gaps.num_resolved("alpha") > before["alpha"]


def test_another_tenants_gaps_file_under_a_tenants_name_is_set_aside_and_replaces_no_one(tmp_path, caplog):
    """An older copy of alpha's gap file under gamma's name replaced alpha's statistics
    (the later file in sort order won) and dropped gamma's, silently."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from cache.tenant_files import tenant_file_stem
    from gateway.forecasting import GAPS_DIR, ForecastRelay

    gaps = tmp_path / GAPS_DIR
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        old = ForecastRelay(predictor, {})
        feed_two_answer_sessions(old, range(2), tenant="alpha")
        old.save(tmp_path / "old")
        relay = ForecastRelay(predictor, {})
        for tenant in TENANTS:
            feed_two_answer_sessions(relay, range(12), tenant=tenant)
        relay.save(tmp_path)
        gamma = gaps / f"{tenant_file_stem('gamma')}.json"
        gamma.write_text((tmp_path / "old" / GAPS_DIR / f"{tenant_file_stem('alpha')}.json").read_text())
        restored = ForecastRelay(predictor, {})
        with caplog.at_level(logging.WARNING):
            restored.restore_gaps(tmp_path)
        assert restored.gaps.num_resolved("alpha") == relay.gaps.num_resolved("alpha")
        assert restored.gaps.num_resolved("beta") == relay.gaps.num_resolved("beta")
        assert restored.gaps.num_resolved("gamma") == 0 and not gamma.exists()
        [record] = caplog.records
        assert f"{gamma} holds tenant 'alpha', not the one its name is for; moved it to" in record.getMessage()
