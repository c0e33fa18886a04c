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


def test_ratios_are_none_where_a_policy_has_no_figure_not_a_type_error():
    from benchmarks.e2e_runs import ratios

    lru = {"ttft_mean_s": 2.0, "ttft_p99_s": 4.0, "session_e2e_p50_s": 9.0}
    predictive = {"ttft_mean_s": 1.0, "ttft_p99_s": 3.2, "session_e2e_p50_s": 6.0}
    assert ratios({"lru": lru, "predictive": predictive}) == {
        "lru_over_predictive_ttft_mean": 2.0, "lru_over_predictive_ttft_p99": 1.25,
        "lru_over_predictive_session_e2e_p50": 1.5}
    failed = {"ttft_mean_s": None, "ttft_p99_s": None, "session_e2e_p50_s": None}
    assert set(ratios({"lru": lru, "predictive": failed}).values()) == {None}
    assert ratios({"lru": lru, "none": {"ttft_mean_s": 6.0}}) == {"none_over_lru_ttft_mean": 3.0}


def test_a_policy_whose_every_request_failed_ends_the_benchmark_with_one_line(capsys):
    from benchmarks.e2e_runs import failed_requests

    with pytest.raises(SystemExit) as stopped:
        failed_requests("lru", {"requests": 7, "errors": 7}, ["HTTP 400: token id 99999 is out of range"])
    assert str(stopped.value) == ("bench_e2e: every one of the 7 requests of the lru run failed: "
                                  "HTTP 400: token id 99999 is out of range")
    failed_requests("predictive", {"requests": 7, "errors": 2}, ["HTTP 503: busy"])   # some: said, not fatal
    assert capsys.readouterr().err == ("bench_e2e: 2 of 7 requests of the predictive run failed (its figures "
                                       "cover the others): HTTP 503: busy\n")
    failed_requests("ttl", {"requests": 7, "errors": 0}, [])
    assert capsys.readouterr().err == ""
