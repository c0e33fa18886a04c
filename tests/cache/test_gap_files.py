"""A gap forecaster kept as one file per tenant: a save writes only the tenants that
changed, a restore gives back what was learned, and a damaged file loses one tenant."""
from __future__ import annotations

import json
import math
import random

import pytest

from cache.forecast_source import RequestSeen
from cache.gap_files import GLOBAL_FILE, GapFiles, merged, split_by_tenant
from cache.gap_forecaster import GapForecaster, GapForecasterConfig
from cache.gap_memory import FORMAT
from cache.tenant_files import tenant_file_stem

TENANTS = ("alpha", "beta", "odd/tenant name", "delta")
FEATURES = GapForecaster().return_features   # what `trained()` is configured with


def feed_tenants(forecaster: GapForecaster, rng: random.Random, num_sessions: int, t0: float = 0.0,
                 tenants=TENANTS) -> None:
    """Sessions of each tenant: a tool (median 3 s), then the user (median 30 s), and a
    third of them a last turn."""
    events = []
    for tenant in tenants:
        for i in range(num_sessions):
            t = t0 + 50.0 * i + rng.random()
            events.append((t, tenant, i, ("search",)))
            t += rng.lognormvariate(math.log(3.0), 0.4)
            events.append((t, tenant, i, ()))
            if i % 3 == 0:
                events.append((t + rng.lognormvariate(math.log(30.0), 0.4), tenant, i, ()))
    for t, tenant, i, tools in sorted(events):
        forecaster.observe(RequestSeen(tenant, f"s{i}", t, tool_calls=tools, num_blocks=3))


def save(forecaster: GapForecaster, files: GapFiles) -> list[str]:
    marks = forecaster.change_marks()
    stale = files.stale(marks)
    files.write(forecaster.learned(stale), {t: marks[t] for t in stale})
    return stale


def trained(seed: int = 0) -> GapForecaster:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=16))
    feed_tenants(forecaster, random.Random(seed), 40)
    return forecaster


def test_learned_for_some_tenants_is_the_whole_restricted_to_their_levels() -> None:
    forecaster = trained()
    whole, some = forecaster.learned(), forecaster.learned(["beta", "delta", "never-seen"])
    mine = lambda key: not key or key[0] in ("beta", "delta")  # noqa: E731
    assert some.gaps == {k: v for k, v in whole.gaps.items() if mine(k)}
    assert some.returns == {k: v for k, v in whole.returns.items() if mine(k)}
    assert some.p_estimates == {k: v for k, v in whole.p_estimates.items() if mine(k)}
    assert some.steps == {"beta": whole.steps["beta"], "delta": whole.steps["delta"]}
    assert forecaster.learned([]).steps == {} and () in forecaster.learned([]).gaps


def test_split_then_merged_is_the_identity() -> None:
    learned = trained().learned()
    shared, parts = split_by_tenant(learned)
    assert set(parts) == set(TENANTS) and set(shared.gaps) == {()} and shared.steps == {}
    assert all(key[0] == tenant for tenant, part in parts.items() for key in part.returns)
    assert merged(learned.return_features, [shared, *parts.values()]) == learned


def test_a_forecaster_restored_from_the_files_forecasts_as_the_original(tmp_path) -> None:
    original = trained()
    files = GapFiles(tmp_path / "gaps")
    assert sorted(save(original, files)) == sorted(TENANTS)
    names = sorted(p.name for p in (tmp_path / "gaps").iterdir())
    assert names == sorted([GLOBAL_FILE, *(f"{tenant_file_stem(t)}.json" for t in TENANTS)])  # no temporaries
    assert all(json.loads((tmp_path / "gaps" / n).read_text())["format"] == FORMAT for n in names)
    learned, problems = GapFiles(tmp_path / "gaps").read(FEATURES)
    assert problems == [] and learned == original.learned()
    restored = GapForecaster(GapForecasterConfig(recount_every=16))
    restored.adopt(learned)
    for forecaster in (original, restored):
        forecaster.observe(RequestSeen("odd/tenant name", "new", 9_000.0, tool_calls=("search",), num_blocks=3))
    after = restored.forecast("odd/tenant name", "new", 9_000.0)
    assert after.confident and after == original.forecast("odd/tenant name", "new", 9_000.0)


def test_a_save_writes_only_the_tenants_that_changed_since_the_last_one(tmp_path) -> None:
    forecaster = trained()
    forecaster.forecast("alpha", "s0", 1e6)   # every wait resolved: later requests expire none
    files = GapFiles(tmp_path)
    save(forecaster, files)
    def written() -> dict[str, int]:   # every write replaces the file: a new inode
        return {p.name: p.stat().st_ino for p in tmp_path.iterdir()}

    before = written()
    assert save(forecaster, files) == []   # nothing changed: no file written, the global one neither
    assert {name for name, inode in written().items() if before[name] != inode} == set()
    beta_before = (tmp_path / f"{tenant_file_stem('beta')}.json").read_text()
    forecaster.observe(RequestSeen("beta", "late", 1e6 + 1, tool_calls=("search",), num_blocks=3))
    forecaster.observe(RequestSeen("beta", "late", 1e6 + 4, num_blocks=4))
    before = written()
    assert save(forecaster, files) == ["beta"]
    assert {name for name, inode in written().items() if before[name] != inode} == {
        f"{tenant_file_stem('beta')}.json", GLOBAL_FILE}
    assert (tmp_path / f"{tenant_file_stem('beta')}.json").read_text() != beta_before
    (tmp_path / f"{tenant_file_stem('alpha')}.json").unlink()   # a file gone is written again
    assert save(forecaster, files) == ["alpha"]
    learned, _ = GapFiles(tmp_path).read(FEATURES)
    assert learned.returns == forecaster.learned().returns and learned.gaps == forecaster.learned().gaps


def test_waits_given_up_and_sessions_forgotten_count_as_changes() -> None:
    forecaster = trained()
    marks = forecaster.change_marks()
    forecaster.forecast("alpha", "s0", 1e9)   # every pending wait of every tenant expires
    expired = forecaster.change_marks()
    assert {t for t in TENANTS if expired[t] != marks[t]} == set(TENANTS)
    forecaster.observe(RequestSeen("delta", "fresh", 2e9, num_blocks=1))
    forecaster.forget("delta", "fresh")
    assert forecaster.change_marks()["delta"] == expired["delta"] + 2
    assert all(forecaster.change_marks()[t] == expired[t] for t in ("alpha", "beta"))


def test_a_damaged_tenant_file_loses_that_tenant_only(tmp_path) -> None:
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    damaged = tmp_path / f"{tenant_file_stem('beta')}.json"
    damaged.write_text("{truncated")
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert len(problems) == 1 and problems[0].path == damaged and "could not be read" in problems[0].why
    assert set(learned.steps) == set(TENANTS) - {"beta"}
    assert not any(key and key[0] == "beta" for key in (*learned.gaps, *learned.returns, *learned.p_estimates))


def test_a_tenant_file_split_by_other_features_is_skipped(tmp_path) -> None:
    save(trained(), GapFiles(tmp_path))
    other = GapForecaster(GapForecasterConfig(answers_cap=0))
    feed_tenants(other, random.Random(1), 5, tenants=("zeta",))
    save(other, GapFiles(tmp_path / "other"))
    (tmp_path / "other" / f"{tenant_file_stem('zeta')}.json").rename(tmp_path / f"{tenant_file_stem('zeta')}.json")
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert "zeta" not in learned.steps and len(problems) == 1 and "return features" in problems[0].why


def test_a_missing_global_file_loses_the_all_tenant_level_only(tmp_path) -> None:
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    (tmp_path / GLOBAL_FILE).unlink()
    assert GapFiles(tmp_path).exists() and not GapFiles(tmp_path / "empty").exists()
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert problems == [] and set(learned.steps) == set(TENANTS) and () not in learned.gaps
    assert learned.returns == {k: v for k, v in forecaster.learned().returns.items() if k}


def make_global_unusable(directory, how: str) -> None:
    """Make the global gap file in `directory` unusable: "garbage", "other features" or a directory."""
    path = directory / GLOBAL_FILE
    if how == "garbage":
        path.write_text("garbage\n")
    elif how == "other features":
        data = json.loads(path.read_text())
        data["return_features"] = [0]
        path.write_text(json.dumps(data))
    else:
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize("how", ["garbage", "other features", "a directory"])
def test_an_unusable_global_file_loses_the_all_tenant_level_only(tmp_path, how) -> None:
    """The global file is a prior: damaged, it must not take every tenant's good file
    with it (they were not read at all, or all judged by its return features)."""
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    make_global_unusable(tmp_path, how)
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert [p.path for p in problems] == [tmp_path / GLOBAL_FILE]
    assert set(learned.steps) == set(TENANTS) and () not in learned.gaps and () not in learned.returns
    whole = forecaster.learned()
    assert learned.returns == {k: v for k, v in whole.returns.items() if k}
    assert learned.gaps == {k: v for k, v in whole.gaps.items() if k}


def test_a_tenant_file_holding_another_tenant_is_left_out(tmp_path) -> None:
    """An older copy of alpha's file under beta's name must neither replace alpha's levels
    nor pass for beta's."""
    old = GapForecaster(GapForecasterConfig(recount_every=16))
    feed_tenants(old, random.Random(5), 3, tenants=("alpha",))
    save(old, GapFiles(tmp_path / "old"))
    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    beta = tmp_path / f"{tenant_file_stem('beta')}.json"
    beta.write_text((tmp_path / "old" / f"{tenant_file_stem('alpha')}.json").read_text())
    learned, problems = GapFiles(tmp_path).read(FEATURES)
    assert [(p.path, p.why) for p in problems] == [(beta, "holds tenant 'alpha', not the one its name is for")]
    assert set(learned.steps) == set(TENANTS) - {"beta"}
    assert learned.returns[("alpha",)] == forecaster.learned().returns[("alpha",)]


def test_a_file_that_cannot_be_set_aside_is_never_written_over(tmp_path, monkeypatch, caplog) -> None:
    """A read-only directory: the damaged file stays; its tenant learns anew in memory,
    but no save puts that smaller state in place of the file."""
    from types import SimpleNamespace

    from cache import damaged_files

    forecaster = trained()
    save(forecaster, GapFiles(tmp_path))
    beta = tmp_path / f"{tenant_file_stem('beta')}.json"
    beta.write_text("{cut")

    def refuse(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(damaged_files, "os", SimpleNamespace(replace=refuse))
    files = GapFiles(tmp_path)
    learned, problems = files.read(FEATURES)
    files.set_aside(problems)
    assert "could not be set aside either" in caplog.text and beta.read_text() == "{cut"
    resumed = GapForecaster(GapForecasterConfig(recount_every=16))
    resumed.adopt(learned)
    files.mark_written(resumed.change_marks())
    feed_tenants(resumed, random.Random(9), 3, t0=1e5, tenants=("alpha", "beta"))
    assert save(resumed, files) == ["alpha"]
    assert beta.read_text() == "{cut"
