from __future__ import annotations

from agents_trace.replay.client import RequestResult
from agents_trace.replay.report import build_report, format_table, percentile
from agents_trace.replay.runner import group_sessions
from cache.trace_format import TraceRecord


def test_percentile_known_answers():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([1, 2], 50) == 1.5
    assert percentile([7], 99) == 7
    assert percentile([], 50) is None


def test_build_report_counts_cached_share_errors_and_sessions():
    results = [
        RequestResult("a", "s1", 0, 0.0, ttft_s=0.5, e2e_s=1.0, prompt_tokens=100, cached_tokens=0),
        RequestResult("a", "s1", 1, 3.0, ttft_s=0.1, e2e_s=0.5, prompt_tokens=120, cached_tokens=96,
                      inter_token_s=[0.01, 0.03]),
        RequestResult("b", None, 0, 1.0, error="HTTP 429: slow down"),
    ]
    report = build_report(results, wall_s=4.0)
    total = report["total"]
    assert total["requests"] == 3 and total["errors"] == 1
    assert total["cached_token_share"] == round(96 / 220, 4)
    assert total["session_e2e_p50_s"] == 3.5  # from 0.0 to 3.0 + 0.5
    assert total["itl_p50_s"] == 0.02
    assert report["per_tenant"]["b"]["errors"] == 1
    assert report["per_step"]["1"]["ttft_p50_s"] == 0.1
    assert total["request_e2e_p50_s"] == 0.75
    table = format_table(report)
    assert "HTTP 429" in table
    assert "per_tier" not in report and "tier " not in table   # no flex line: no tier rows


def test_a_replay_with_flex_lines_reports_each_tier_apart():
    results = [RequestResult("a", "s1", 0, 0.0, ttft_s=0.2, e2e_s=0.3, prompt_tokens=100, cached_tokens=50),
               RequestResult("a", None, 0, 0.5, ttft_s=1.0, e2e_s=2.0, prompt_tokens=300, service_tier="flex"),
               RequestResult("a", None, 0, 1.5, ttft_s=3.0, e2e_s=4.0, prompt_tokens=300, service_tier="flex")]
    report = build_report(results, wall_s=5.0)
    assert {tier: stats["requests"] for tier, stats in report["per_tier"].items()} == {"default": 1, "flex": 2}
    assert report["per_tier"]["default"]["ttft_mean_s"] == 0.2 and report["per_tier"]["flex"]["ttft_mean_s"] == 2.0
    assert report["per_tier"]["default"]["cached_token_share"] == 0.5
    rows = [line.split()[:3] for line in format_table(report).splitlines() if line.startswith("tier ")]
    assert rows == [["tier", "default", "1"], ["tier", "flex", "2"]]


def test_format_table_reads_in_units_and_leaves_session_time_out_of_step_rows():
    results = [
        RequestResult("a", "s1", 0, 0.0, ttft_s=0.5, e2e_s=1.0, prompt_tokens=100, cached_tokens=0),
        RequestResult("a", "s1", 1, 3.0, ttft_s=0.1, e2e_s=0.5, prompt_tokens=120, cached_tokens=96,
                      inter_token_s=[0.01, 0.03]),
    ]
    lines = format_table(build_report(results, wall_s=4.0)).splitlines()
    total = lines[2].split()
    # total: 2 requests, 0 errors, TTFT mean/p50/p90/p99, ITL p50 in ms, request and
    # session e2e p50, cached share in percent
    assert total == ["total", "2", "0", "0.300", "0.300", "0.460", "0.496", "20.0", "0.75",
                     "3.50", "43.6%"]
    step1 = next(line for line in lines if line.startswith("step 1")).split()
    assert step1 == ["step", "1", "1", "0", "0.100", "0.100", "0.100", "0.100", "20.0", "0.50",
                     "-", "80.0%"]
    assert len({len(line) for line in lines}) == 1  # columns line up


def test_an_interrupted_report_counts_what_was_left_out_and_says_so():
    results = [RequestResult("a", "s1", 0, 0.0, ttft_s=0.5, e2e_s=1.0, prompt_tokens=100)]
    assert "interrupted" not in build_report(results, wall_s=2.0)
    report = build_report(results, wall_s=2.0, num_planned=5)
    assert report["interrupted"] == {"requests_left_out": 4} and report["total"]["requests"] == 1
    assert format_table(report).splitlines()[-1] == \
        "interrupted: 4 requests left out (aborted in flight or never sent)"


def test_group_sessions_keeps_order_and_splits_sessionless():
    records = [TraceRecord(0, 1, 1, tenant="a", session="x"), TraceRecord(1, 1, 1),
               TraceRecord(2, 1, 1, tenant="a", session="x"), TraceRecord(3, 1, 1, tenant="b", session="x")]
    groups = group_sessions(records)
    assert [len(g) for g in groups] == [2, 1, 1]
    assert groups[0][1] == (2, records[2]) and groups[1] == [(1, records[1])]   # each with its index


def test_errors_are_listed_in_the_order_they_first_happened_with_their_counts():
    """QA210 F2: not in string order; by when each failed request was sent (the results
    come in the order they ended), each message once, with how many requests got it."""
    results = [RequestResult("a", None, 0, 2.0, error="HTTP 400: you requested 112886 tokens"),
               RequestResult("a", None, 0, 0.5, error="ServerDisconnectedError: gone"),
               RequestResult("a", None, 0, 1.0, error="HTTP 400: you requested 11382 tokens"),
               RequestResult("a", None, 0, 3.0, error="ServerDisconnectedError: gone"),
               RequestResult("a", None, 0, 4.0, ttft_s=0.1, e2e_s=0.2)]
    results += [RequestResult("a", None, 0, 10.0 + i, error=f"HTTP 500: number {i}") for i in range(12)]
    report = build_report(results, wall_s=30.0)
    assert report["error_samples"][:3] == ["ServerDisconnectedError: gone", "HTTP 400: you requested 11382 tokens",
                                          "HTTP 400: you requested 112886 tokens"]
    assert len(report["error_samples"]) == 10 and report["error_samples"][-1] == "HTTP 500: number 6"
    assert report["error_counts"][:2] == [{"error": "ServerDisconnectedError: gone", "count": 2},
                                          {"error": "HTTP 400: you requested 11382 tokens", "count": 1}]
    assert [e["error"] for e in report["error_counts"]] == report["error_samples"]
    errors_line = next(line for line in format_table(report).splitlines() if line.startswith("errors: "))
    assert errors_line.startswith("errors: 2× ServerDisconnectedError: gone; 1× HTTP 400: you requested 11382 "
                                  "tokens; 1× HTTP 400: you requested 112886 tokens; 1× HTTP 500: number 0")
    assert build_report([], 0.0)["error_counts"] == []


def test_table_columns_line_up_after_a_tenant_name_of_wide_characters():
    """QA210 F5: the group column counts terminal columns (中 takes two), not characters."""
    from agents_trace.text_table import display_width

    results = [RequestResult(name, "s1", 0, 0.0, ttft_s=0.5, e2e_s=1.0, prompt_tokens=100)
               for name in ("té中" * 5, "plain")]
    lines = format_table(build_report(results, wall_s=2.0)).splitlines()
    assert len({display_width(line) for line in lines}) == 1
