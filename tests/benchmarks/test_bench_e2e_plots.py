"""bench_e2e.py's plots go where --out-dir says (default: docs/), and a --plot-from file
that cannot be read or is not this script's output is one usage error line, exit 2."""
from __future__ import annotations

import json
import sys

import pytest

from benchmarks import bench_e2e

SAVED = {"model": "tiny", "requests": 12,
         "policies": {policy: {"total": {"ttft_p50_s": 0.1, "ttft_mean_s": 0.2, "ttft_p99_s": 0.4}}
                      for policy in ("predictive", "lru")},
         "capacity": {"slo_p99_ttft_s": 2.0, "p99_ttft_by_tenants": {"lru": {"1": 0.5, "2": 3.0},
                                                                     "predictive": {"1": 0.4, "2": 1.5}}}}


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", *argv])
    bench_e2e.main()


def test_plot_from_draws_into_out_dir_and_not_docs(tmp_path, monkeypatch):
    saved = tmp_path / "run.jsonl"
    saved.write_text('{"progress": "lru"}\n' + json.dumps(SAVED) + "\n")   # the script's output: last line
    docs_before = {path.name for path in bench_e2e.DOCS.glob("plotcheck_*")}
    _main(monkeypatch, "--plot-from", str(saved), "--plot-name", "plotcheck", "--out-dir", str(tmp_path / "plots"))
    assert sorted(path.name for path in (tmp_path / "plots").iterdir()) == ["plotcheck_capacity.png", "plotcheck_ttft.png"]
    assert {path.name for path in bench_e2e.DOCS.glob("plotcheck_*")} == docs_before == set()


def test_the_default_out_dir_is_the_repositorys_docs():
    assert bench_e2e.DOCS.name == "docs" and (bench_e2e.DOCS.parent / "benchmarks" / "bench_e2e.py").is_file()


@pytest.mark.parametrize("name, text, reason", [
    ("missing.json", None, "cannot read"),
    ("empty.json", "", "is not bench_e2e.py's output"),
    ("not_json.json", "hello\n", "is not JSON"),
    ("other.json", json.dumps({"policy": "lru", "block_hit_rate": 0.1}), "is not bench_e2e.py's output"),
    ("bad_policy.json", json.dumps({"model": "m", "requests": 1, "policies": {"lru": {}}}),
     "is not bench_e2e.py's output"),
])
def test_a_bad_plot_from_file_is_a_usage_error(tmp_path, monkeypatch, capsys, name, text, reason):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        _main(monkeypatch, "--plot-from", str(path), "--out-dir", str(tmp_path / "plots"))
    assert stop.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("bench_e2e.py: error: argument --plot-from:") and reason in last


def test_an_out_dir_that_cannot_be_written_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        _main(monkeypatch, "--plot", "--out-dir", str(blocker / "plots"), "--model", "tiny")
    assert stop.value.code == 2
    assert "argument --out-dir:" in capsys.readouterr().err.splitlines()[-1]
