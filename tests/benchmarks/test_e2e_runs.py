from __future__ import annotations

import os

import pytest

from benchmarks.e2e_runs import median_run, median_totals, policy_orders, run_isolated


def _pid_times(factor: int) -> dict:
    return {"pid": os.getpid(), "value": 21 * factor}


def _fails() -> dict:
    raise ValueError("no gateway")


def test_policy_orders_alternate_between_given_and_reversed():
    assert policy_orders(["p", "l", "n"], 3) == [["p", "l", "n"], ["n", "l", "p"], ["p", "l", "n"]]
    assert policy_orders(["p", "l"], 0) == [["p", "l"]]


def test_median_totals_takes_each_numeric_field_median_and_keeps_none():
    totals = [{"ttft_mean_s": 3.0, "errors": 0, "p99": None, "name": "a"},
              {"ttft_mean_s": 1.0, "errors": 2, "p99": 1.0, "name": "b"},
              {"ttft_mean_s": 2.0, "errors": 1, "p99": 2.0, "name": "c"}]
    assert median_totals(totals) == {"ttft_mean_s": 2.0, "errors": 1, "p99": None, "name": "a"}
    assert median_totals(totals[1:])["ttft_mean_s"] == 1.5


def test_median_run_is_the_middle_run_by_mean_ttft():
    runs = [{"total": {"ttft_mean_s": t}, "id": i} for i, t in enumerate([0.3, 0.1, 0.2, 0.4])]
    assert median_run(runs)["id"] == 2  # lower middle of 0.1, 0.2, 0.3, 0.4
    assert median_run(runs[:3])["id"] == 2


def test_run_isolated_runs_in_another_process_and_returns_its_result():
    out = run_isolated(_pid_times, 2)
    assert out["value"] == 42 and out["pid"] != os.getpid()


def test_run_isolated_raises_the_child_error():
    with pytest.raises(RuntimeError, match="ValueError: no gateway"):
        run_isolated(_fails)


def _dies() -> dict:
    os._exit(3)


def test_run_isolated_reports_a_child_that_dies_without_an_answer():
    with pytest.raises(RuntimeError, match="exit code 3"):
        run_isolated(_dies)
