"""A gap file holding a number that is not finite (or a negative count) is damaged: set
aside with one warning, only its tenant (or the all-tenant level) starting anew; no
number that is not finite is ever written; and a save or restart after which nothing
changed rewrites no file, the global one included (QA126 #1 and #3)."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from cache.forecast_source import RequestSeen
from cache.gap_files import GLOBAL_FILE, GapFiles
from cache.gap_forecaster import GapForecaster, GapForecasterConfig
from cache.gap_memory import FORMAT
from cache.gap_stats import LogGapStats
from cache.tenant_files import tenant_file_stem
from tests.cache.test_gap_files import FEATURES, TENANTS, save, trained


def _poison(path, section: str, index: int, value: str) -> None:
    """Put `value` (JSON text: NaN, Infinity, 1e999, -1, "NaN") as field `index` of the
    first entry of `section` in the gaps file at `path`, as a hand edit would."""
    data = json.loads(path.read_text())
    data[section][0][index] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', value))


@pytest.fixture
def writes(monkeypatch) -> list[str]:
    """The names of the gap files written from now on (every write goes through
    `write_gaps`; inode numbers are no proof: a freed one is soon given out again)."""
    from cache import gap_files

    written: list[str] = []
    real = gap_files.write_gaps

    def recording(learned, path) -> None:
        real(learned, path)
        written.append(Path(path).name)

    monkeypatch.setattr(gap_files, "write_gaps", recording)
    return written


@pytest.mark.parametrize("section, index, value", [
    ("gaps", 1, "NaN"), ("gaps", 2, "Infinity"), ("gaps", 3, "-Infinity"), ("gaps", 1, "1e999"),
    ("gaps", 1, "-1"), ("gaps", 1, '"NaN"'), ("returns", 1, "NaN"), ("returns", 2, "-3"),
    ("p_estimates", 1, "NaN"), ("p_estimates", 1, "1.5"),
])
def test_a_tenant_gap_file_with_a_non_finite_or_negative_number_is_set_aside(tmp_path, caplog, section, index,
                                                                              value) -> None:
    forecaster = trained()
    forecaster.forecast("alpha", "s0", 1e6)   # a recount's estimates are there too
    save(forecaster, GapFiles(tmp_path))
    beta = tmp_path / f"{tenant_file_stem('beta')}.json"
    _poison(beta, section, index, value)
    files = GapFiles(tmp_path)
    learned, problems = files.read(FEATURES)
    assert [p.path for p in problems] == [beta] and "could not be read" in problems[0].why
    assert set(learned.steps) == set(TENANTS) - {"beta"}
    assert learned.returns[("alpha",)] == forecaster.learned().returns[("alpha",)]
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        files.set_aside(problems)
    assert len(caplog.records) == 1 and str(beta) in caplog.records[0].getMessage()
    assert not beta.exists() and len(list(tmp_path.glob(f"{beta.name}.damaged-*"))) == 1


def test_a_nan_in_a_gap_file_no_longer_gives_confident_nan_forecasts(tmp_path) -> None:
    """QA126's repro: the file was adopted and every ETA of the tenant's forecasts was NaN,
    confident; now the tenant starts anew (not confident) and the others are unchanged."""
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    _poison(tmp_path / f"{tenant_file_stem('beta')}.json", "gaps", 1, "NaN")
    restored = GapForecaster(GapForecasterConfig(recount_every=16))
    learned, problems = GapFiles(tmp_path).read(restored.return_features)
    restored.adopt(learned)
    for tenant in ("alpha", "beta"):
        restored.observe(RequestSeen(tenant, "new", 1e7, tool_calls=("search",), num_blocks=3))
        forecast = restored.forecast(tenant, "new", 1e7 + 0.01)
        assert all(math.isfinite(s) for _, s in forecast.eta_quantiles_s)
        assert all(math.isfinite(h) and math.isfinite(p) for h, p in forecast.p_return_within)
        assert forecast.confident == (tenant == "alpha")


def test_a_global_gap_file_with_nan_is_set_aside_and_the_tenants_load(tmp_path, caplog) -> None:
    save(trained(), GapFiles(tmp_path))
    _poison(tmp_path / GLOBAL_FILE, "gaps", 2, "NaN")
    files = GapFiles(tmp_path)
    learned, problems = files.read(FEATURES)
    assert [p.path for p in problems] == [tmp_path / GLOBAL_FILE]
    assert "non-finite" in problems[0].why
    assert set(learned.steps) == set(TENANTS) and () not in learned.gaps
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        files.set_aside(problems)
    assert len(caplog.records) == 1 and not (tmp_path / GLOBAL_FILE).exists()


def test_no_number_that_is_not_finite_is_written(tmp_path) -> None:
    """A NaN in memory (however it got there) is never written: not that tenant's file,
    which keeps its last good content; the others are written; the save says so."""
    forecaster = trained()
    files = GapFiles(tmp_path)
    save(forecaster, files)
    beta = tmp_path / f"{tenant_file_stem('beta')}.json"
    beta_text = beta.read_text()
    learned = forecaster.learned()
    learned.gaps[("beta",)] = LogGapStats(math.nan, 1.0, 1.0)
    learned.gaps[("alpha",)] = LogGapStats(99.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="beta"):
        files.write(learned, {})
    assert beta.read_text() == beta_text
    alpha = json.loads((tmp_path / f"{tenant_file_stem('alpha')}.json").read_text())
    assert [1.0, 1.0] in [entry[2:] for entry in alpha["gaps"] if entry[0] == ["alpha"]]
    for path in tmp_path.iterdir():
        assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def test_a_save_after_which_nothing_changed_rewrites_no_file(tmp_path, writes) -> None:
    forecaster = trained()
    forecaster.forecast("alpha", "s0", 1e6)   # every wait resolved
    files = GapFiles(tmp_path)
    save(forecaster, files)
    assert GLOBAL_FILE in writes
    writes.clear()
    assert save(forecaster, files) == [] and writes == []   # the global file neither
    (tmp_path / GLOBAL_FILE).unlink()   # gone: written again
    save(forecaster, files)
    assert writes == [GLOBAL_FILE]
    writes.clear()
    forecaster.observe(RequestSeen("beta", "late", 1e6 + 1, tool_calls=("search",), num_blocks=3))
    forecaster.observe(RequestSeen("beta", "late", 1e6 + 4, num_blocks=4))
    assert save(forecaster, files) == ["beta"]
    assert sorted(writes) == sorted([f"{tenant_file_stem('beta')}.json", GLOBAL_FILE])


def test_a_restart_rewrites_no_file_it_did_not_change_then_saves_what_changed(tmp_path, writes) -> None:
    """As `gateway.forecasting.ForecastRelay.restore_gaps` then `save` do it: read, adopt,
    mark written; the global level adopted is then learned into in place, and that change
    is saved."""
    forecaster = trained()
    forecaster.forecast("alpha", "s0", 1e6)
    save(forecaster, GapFiles(tmp_path))
    writes.clear()
    resumed = GapForecaster(GapForecasterConfig(recount_every=16))
    files = GapFiles(tmp_path)
    learned, problems = files.read(resumed.return_features)
    assert problems == []
    resumed.adopt(learned)
    files.mark_written(resumed.change_marks())
    assert save(resumed, files) == [] and writes == []
    global_before = (tmp_path / GLOBAL_FILE).read_text()
    resumed.observe(RequestSeen("gamma", "x", 2e6, tool_calls=("search",), num_blocks=3))
    resumed.observe(RequestSeen("gamma", "x", 2e6 + 3, num_blocks=3))
    assert save(resumed, files) == ["gamma"] and GLOBAL_FILE in writes
    assert (tmp_path / GLOBAL_FILE).read_text() != global_before
    assert GapFiles(tmp_path).read(FEATURES)[0].gaps[()] == resumed.learned().gaps[()]


def test_a_gateway_restart_with_no_traffic_rewrites_no_gap_file(tmp_path, writes) -> None:
    """QA126 #3 at the relay: start, no traffic, shutdown save: `_gaps/_global.json` was
    rewritten every time."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from gateway.forecasting import ForecastRelay
    from tests.gateway.test_forecasting import feed_two_answer_sessions

    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        for tenant in ("alpha", "beta"):
            feed_two_answer_sessions(relay, range(4), tenant=tenant)
        relay.save(tmp_path)
        assert GLOBAL_FILE in writes
        writes.clear()
        restarted = ForecastRelay(predictor, {})
        restarted.restore_gaps(tmp_path)
        restarted.save(tmp_path)
        restarted.save(tmp_path)
        assert writes == []


@pytest.mark.parametrize("damage", ["huge_integer", "deep_nesting"])
def test_a_gap_file_too_large_for_a_float_or_nested_too_deeply_is_unreadable_not_fatal(tmp_path, damage):
    """QA131: a count of 401 digits (OverflowError) or JSON nested past the parser's depth
    (RecursionError) escaped `read`, so the forecaster started cold for every tenant and its
    next save wrote over their files; now such a file is one unusable file."""
    from cache.gap_memory import read_gaps

    path = tmp_path / "t-x.json"
    if damage == "huge_integer":
        path.write_text('{"format": "%s", "return_features": [1], "gaps": [[["x"], %s, 0.0, 0.0]], '
                        '"returns": [], "p_estimates": [], "steps": {}}' % (FORMAT, "9" * 401))
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        read_gaps(path)


@pytest.mark.parametrize("section, index, value", [
    ("gaps", 2, "1e308"), ("gaps", 2, "-1e308"), ("gaps", 3, "1e308"), ("gaps", 1, "1e300"),
    ("returns", 1, "1e300"),
])
def test_a_gap_file_with_sums_no_gaps_could_make_is_set_aside(tmp_path, section, index, value) -> None:
    """QA131 L1: a finite but absurd sum (1e308 as a sum of log gaps) passed the checks and
    every forecast of the tenant then raised OverflowError; sums past count x the largest
    log gap, and counts past 2**53, are damage now."""
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    beta = tmp_path / f"{tenant_file_stem('beta')}.json"
    _poison(beta, section, index, value)
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert [p.path for p in problems] == [beta]
    assert set(learned.steps) == set(TENANTS) - {"beta"}


def test_sums_of_gaps_at_the_bounds_are_read_as_written(tmp_path) -> None:
    """Gaps all at MIN_GAP_S (the lowest log gap), added up one by one, read back as kept."""
    from cache.gap_memory import LearnedGaps, read_gaps, write_gaps
    from cache.gap_stats import MIN_GAP_S

    stats = LogGapStats()
    for _ in range(1000):
        stats.add(MIN_GAP_S / 10)
    learned = LearnedGaps((), gaps={("t",): stats})
    write_gaps(learned, tmp_path / "g.json")
    assert read_gaps(tmp_path / "g.json").gaps == {("t",): stats}


def test_a_return_feature_that_is_no_whole_number_is_damage(tmp_path) -> None:
    from cache.gap_memory import gaps_from_json, gaps_to_json, LearnedGaps

    data = gaps_to_json(LearnedGaps((1, 2)))
    data["return_features"] = [0.5, 2]   # was read as [0, 2]
    with pytest.raises(ValueError, match="whole number"):
        gaps_from_json(data)


def test_a_gap_no_clock_could_measure_is_damage_and_is_learned_at_most_max_gap() -> None:
    """QA143 M2: one gap of e^700 s (sum 700, squares 490000) passed the bound of the
    largest float's log, and every forecast of the tenant raised OverflowError; a sum of
    squares below what its sum makes passed too. Learned gaps are capped at MAX_GAP_S."""
    from cache.gap_memory import LearnedGaps, gaps_from_json, gaps_to_json
    from cache.gap_stats import MAX_GAP_S

    data = gaps_to_json(LearnedGaps(()))
    for row in ([["t"], 1, 700.0, 490000.0], [["t"], 2, 10.0, 1.0]):   # e^700 s; n x squares < sum²
        data["gaps"] = [row]
        with pytest.raises(ValueError):
            gaps_from_json(data)
    stats = LogGapStats()
    stats.add(1e300)
    assert stats.sum_log == pytest.approx(math.log(MAX_GAP_S))
    data["gaps"] = [[["t"], stats.num_gaps, stats.sum_log, stats.sum_log_sq]]
    assert gaps_from_json(data).gaps[("t",)] == stats
