"""The report's send lag (how late the harness sent its requests, in `total`) and its
per-step rows, whose requests are one step of many sessions: no session times there."""
from __future__ import annotations

from agents_trace.replay.client import RequestResult
from agents_trace.replay.report import build_report, format_table, late_send_warning


def _result(step: int, sent_at_s: float, lag_s: float, session: str = "s1") -> RequestResult:
    return RequestResult("a", session, step, sent_at_s, ttft_s=0.1, e2e_s=0.5, prompt_tokens=10,
                           send_lag_s=lag_s)


def test_total_reports_send_lag_percentiles_the_worst_and_how_many_went_out_late():
    results = [_result(0, 0.0, 0.0), _result(1, 1.0, 0.05), _result(2, 2.0, 0.2), _result(3, 3.0, 2.0),
               RequestResult("a", "s1", 4, 6.0, error="HTTP 400: bad", send_lag_s=0.3)]
    total = build_report(results, wall_s=7.0)["total"]
    assert total["send_lag_p50_s"] == 0.2 and total["send_lag_max_s"] == 2.0
    assert total["send_lag_p99_s"] == round(0.3 + (2.0 - 0.3) * 0.96, 5)
    assert total["requests_sent_late"] == 3   # 0.2, 2.0 and the failed request's 0.3: over 0.1 s
    warning = late_send_warning(build_report(results, wall_s=7.0))
    assert warning.startswith("warning: the replay fell behind its schedule: 3 of 5 requests were sent more "
                              "than 0.1 s late (send lag p50 0.200 s, p99 1.932 s, max 2.000 s)")


def test_a_replay_on_schedule_gets_no_warning_and_plain_results_no_lag():
    on_time = [_result(i, float(i), 0.01) for i in range(5)]
    report = build_report(on_time, wall_s=5.0)
    assert report["total"]["requests_sent_late"] == 0 and late_send_warning(report) is None
    plain = build_report([RequestResult("a", "s1", 0, 0.0, ttft_s=0.1, e2e_s=0.5)], wall_s=1.0)["total"]
    assert plain["send_lag_p50_s"] is None and plain["requests_sent_late"] == 0 and late_send_warning(
        {"total": plain}) is None
    assert "send_lag_p50_s" not in build_report(on_time, wall_s=5.0)["per_tenant"]["a"]   # in total only


def test_step_rows_have_no_session_times_but_tenant_rows_and_total_do():
    results = [_result(0, 0.0, 0.0, "s1"), _result(1, 3.0, 0.0, "s1"), _result(0, 1.0, 0.0, "s2")]
    report = build_report(results, wall_s=4.0)
    for row in report["per_step"].values():
        assert row["session_e2e_p50_s"] is None and row["session_e2e_p99_s"] is None
        assert row["request_e2e_p50_s"] == 0.5
    assert report["total"]["session_e2e_p50_s"] == 2.0   # s1: 0.0 to 3.5, s2: 1.0 to 1.5
    assert report["per_tenant"]["a"]["session_e2e_p99_s"] is not None
    step0 = next(line for line in format_table(report).splitlines() if line.startswith("step 0")).split()
    assert step0[-2] == "-"


def test_a_report_of_a_replay_stopped_before_its_trace_was_read_leaves_the_count_unknown():
    report = build_report([], 0.0, interrupted=True)
    assert report["interrupted"] == {"requests_left_out": None} and report["total"]["requests"] == 0
    assert format_table(report).splitlines()[-1] == "interrupted: stopped before the trace was read"
    assert build_report([], 0.0, num_planned=3, interrupted=True)["interrupted"] == {"requests_left_out": 3}
