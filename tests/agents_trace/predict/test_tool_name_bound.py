"""A tenant's per-name state is bounded and a new tool name is cheap (QA188 F2): at most
4 x MAX_TOOL_SYMBOLS names keep counts and gap statistics (the least used pooled under
`<other tool>`), a name is cut as the trace store cuts it, and a cold tenant's capped
vocabulary is not rebuilt for a name it would pool."""
from __future__ import annotations

import numpy as np

from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from agents_trace.predict import persist
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.vocabulary import MAX_TOOL_SYMBOLS, OTHER_TOOL_SYMBOL

CONFIG = PredictorConfig(background_refits=False)
BOUND = 4 * MAX_TOOL_SYMBOLS


def _flood(predictor: Predictor, sessions: int, per_session: int = 50) -> None:
    """Cold tenant "t": each session runs `common` and `per_session` names never seen before."""
    for i in range(sessions):
        sid = f"s{i}"
        predictor.observe("t", sid, "USER", float(i), None)
        predictor.observe("t", sid, "common", float(i), 0.5)
        for j in range(per_session):
            predictor.observe("t", sid, f"tool_{i}_{j}", float(i), 0.5)
        predictor.observe("t", sid, "END", float(i), 5.0)


def test_names_kept_per_tenant_are_bounded_and_the_most_used_stay():
    with Predictor(CONFIG) as predictor:
        _flood(predictor, 60)   # 3,001 distinct names
        tenant = predictor._tenants["t"]
        assert len(tenant.tool_counts) + len(tenant.live_tools) <= BOUND
        tools = [s for s in tenant.durations.by_symbol if s not in ("USER", "END", "ASSISTANT_TEXT")]
        assert len(tools) <= BOUND
        assert tenant.tool_counts["common"] == 60
        # the forgotten names' counts and gaps are pooled, not lost
        assert sum(tenant.tool_counts.values()) == 60 * 51
        gaps = sum(tenant.durations.by_symbol[s].num_gaps for s in tools)
        assert gaps == 60 * 51
        meta, arrays = persist.tenant_to_parts(tenant)
        assert len(meta["tool_counts"]) <= BOUND and len(meta["durations_symbols"]) <= BOUND + 3
        assert OTHER_TOOL_SYMBOL in meta["tool_counts"]
        predictor.forecast("t", "new", 100.0)   # still forecasts


def test_a_file_saved_with_more_names_is_bounded_when_read(tmp_path):
    with Predictor(CONFIG) as predictor:
        predictor.fit_sequences("t", [["USER", f"tool_{i}", "ASSISTANT_TEXT"] for i in range(2000)],
                                [[1.0, 2.0, 3.0]] * 2000)
        predictor.save(tmp_path)
    meta = persist.read(tmp_path / f"{persist.tenant_stem('t')}.json")[0]
    meta["tool_counts"] = {f"tool_{i}": 1 for i in range(3000)}
    tenant = persist.tenant_from_parts(meta, persist.read(tmp_path / f"{persist.tenant_stem('t')}.json")[1],
                                       CONFIG)
    assert len(tenant.tool_counts) <= BOUND
    assert sum(1 for s in tenant.durations.by_symbol if s.startswith("tool_")) <= BOUND


def test_a_long_name_is_cut_as_the_trace_store_cuts_it():
    with Predictor(CONFIG) as predictor:
        name = "y" * 5000
        predictor.observe("t", "s", "USER", 0.0)
        predictor.observe("t", "s", name, 1.0, 0.5)
        predictor.mark_waiting("t", "s", 2.0, ["z" * 5000])
        forecast = predictor.forecast("t", "s", 2.5)
        tenant = predictor._tenants["t"]
        assert max(map(len, [*tenant.live_tools, *tenant.durations.by_symbol])) == MAX_CLIENT_ID_CHARS
        assert "z" * MAX_CLIENT_ID_CHARS in forecast.next_step and "y" * MAX_CLIENT_ID_CHARS in tenant.live_tools
        assert max(map(len, forecast.next_step)) == MAX_CLIENT_ID_CHARS


def test_a_name_a_capped_cold_vocabulary_pools_does_not_rebuild_it():
    with Predictor(CONFIG) as predictor:
        predictor.observe("t", "s", "USER", 0.0)
        for j in range(MAX_TOOL_SYMBOLS + 10):
            predictor.observe("t", "s", f"a{j:04d}", 1.0, 0.5)
        tenant = predictor._tenants["t"]
        vocab, _ = tenant._cold_vocab_locked()
        table = tenant.durations.table(vocab.symbols)
        predictor.observe("t", "s", "zz_pooled", 2.0, 0.5)   # ranks past the cap: pooled
        predictor.forecast("t", "s", 3.0)
        after, shares = tenant._cold_vocab_locked()
        assert after is vocab and tenant.durations.table(after.symbols) is table
        tenant._cold_vocab = None   # what a rebuild would give: the same
        rebuilt, rebuilt_shares = tenant._cold_vocab_locked()
        assert rebuilt.symbols == vocab.symbols
        np.testing.assert_allclose(shares, rebuilt_shares, rtol=1e-12)


def test_a_new_name_costs_no_rebuild_however_it_sorts():
    """QA191 N1: a name sorting before the known ones displaced one of them and rebuilt the
    capped cold vocabulary per name (~3 ms, 10x an ascending name's); among equally used
    tools the first seen keep their names, so a new one is pooled wherever it sorts."""
    with Predictor(CONFIG) as predictor:
        predictor.observe("t", "s", "USER", 0.0)
        for j in range(MAX_TOOL_SYMBOLS + 10):
            predictor.observe("t", "s", f"m{j:04d}", 1.0, 0.5)
        tenant = predictor._tenants["t"]
        vocab, _ = tenant._cold_vocab_locked()
        table = tenant.durations.table(vocab.symbols)
        for name in ("a", "m0000a", "m9", "zz"):   # before, among and after the known names
            predictor.observe("t", "s", name, 2.0, 0.5)
            predictor.forecast("t", "s", 3.0)
            after, shares = tenant._cold_vocab_locked()
            assert after is vocab and tenant.durations.table(after.symbols) is table
            assert name not in after.index
        tenant._cold_vocab = None   # what a rebuild would give: the same
        rebuilt, rebuilt_shares = tenant._cold_vocab_locked()
        assert rebuilt.symbols == vocab.symbols
        np.testing.assert_allclose(shares, rebuilt_shares, rtol=1e-12)
        # a tool used more than the kept ones takes a name at the next rebuild
        tenant.tool_counts["zz"] = 5
        tenant.live_tools.pop("zz")
        tenant._tools_version += 1
        assert "zz" in tenant._cold_vocab_locked()[0].index
