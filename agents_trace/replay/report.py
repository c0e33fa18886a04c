"""Aggregating replayed requests into the numbers people compare: TTFT percentiles,
inter-token latency, end-to-end time per session, cached-token share and errors, in
total, per tenant and per step index; and, in total, how late the harness sent its
requests against the schedule (`send_lag_*`: TTFT and request times count from the send,
so a replay that fell behind, say for want of `--concurrency`, would hide that wait)."""
from __future__ import annotations

from collections import defaultdict

from agents_trace.replay.client import RequestResult
from agents_trace.text_table import display_width

LATE_SEND_S = 0.1   # a request sent later than this after it was due counts as sent late


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile `q` in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def summarize(results: list[RequestResult], sessions: bool = True) -> dict:
    """Numbers for one group of requests. `sessions` False (a step's requests: one
    request of each session, not sessions) leaves the session times None."""
    ok = [r for r in results if r.error is None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.inter_token_s]
    by_session: dict[tuple[str, str], list[RequestResult]] = defaultdict(list)
    for r in ok:
        if r.session is not None:
            by_session[(r.tenant, r.session)].append(r)
    session_e2e = [max(x.sent_at_s + (x.e2e_s or 0.0) for x in rs) - min(x.sent_at_s for x in rs)
                   for rs in by_session.values()] if sessions else []
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    return {
        "requests": len(results), "errors": len(results) - len(ok),
        "ttft_p50_s": _r(percentile(ttfts, 50)), "ttft_p90_s": _r(percentile(ttfts, 90)),
        "ttft_p99_s": _r(percentile(ttfts, 99)),
        "ttft_mean_s": _r(sum(ttfts) / len(ttfts)) if ttfts else None,
        "itl_p50_s": _r(percentile(gaps, 50)), "itl_p99_s": _r(percentile(gaps, 99)),
        "request_e2e_p50_s": _r(percentile([r.e2e_s for r in ok if r.e2e_s is not None], 50)),
        "session_e2e_p50_s": _r(percentile(session_e2e, 50)),
        "session_e2e_p99_s": _r(percentile(session_e2e, 99)),
        "prompt_tokens": prompt, "cached_tokens": cached,
        "cached_token_share": round(cached / prompt, 4) if prompt else None,
        "completion_tokens": sum(r.completion_tokens for r in ok),
    }


def send_lag(results: list[RequestResult]) -> dict:
    """How late the requests were sent after they were due (every request sent, failed
    ones too): p50, p99 and the worst, in s (None when no result says:
    the runner's results do), and how many were sent more than LATE_SEND_S late."""
    lags = [r.send_lag_s for r in results if r.send_lag_s is not None]
    return {"send_lag_p50_s": _r(percentile(lags, 50)), "send_lag_p99_s": _r(percentile(lags, 99)),
            "send_lag_max_s": _r(max(lags)) if lags else None,
            "requests_sent_late": sum(1 for lag in lags if lag > LATE_SEND_S)}


def late_send_warning(report: dict) -> str | None:
    """A warning line when the replay fell behind its schedule: its p99 send lag is over
    LATE_SEND_S (more than about 1 % of the requests sent that late); None otherwise."""
    total = report["total"]
    if total.get("send_lag_p99_s") is None or total["send_lag_p99_s"] <= LATE_SEND_S:
        return None
    return (f"warning: the replay fell behind its schedule: {total['requests_sent_late']} of {total['requests']} "
            f"requests were sent more than {LATE_SEND_S:g} s late (send lag p50 {total['send_lag_p50_s']:.3f} s, "
            f"p99 {total['send_lag_p99_s']:.3f} s, max {total['send_lag_max_s']:.3f} s); TTFT and request times "
            "count from the send and leave that wait out: raise --concurrency or lower --speed")


MAX_ERRORS_SHOWN = 10


def error_counts(results: list[RequestResult]) -> list[dict]:
    """The distinct error messages in the order they first happened (by when their
    request was sent; ties in the order the results ended), at most MAX_ERRORS_SHOWN,
    each `{"error": message, "count": requests that got it}`."""
    counts: dict[str, int] = {}
    for r in sorted((r for r in results if r.error), key=lambda r: r.sent_at_s):
        counts[r.error] = counts.get(r.error, 0) + 1
    return [{"error": error, "count": count} for error, count in list(counts.items())[:MAX_ERRORS_SHOWN]]


def build_report(results: list[RequestResult], wall_s: float, num_planned: int | None = None,
                 interrupted: bool = False) -> dict:
    """The report of a replay. `num_planned` is given for an interrupted one: the
    report then says so, with the count of requests left out (aborted or never sent);
    `interrupted` with no `num_planned`: stopped before the trace was read, so how many
    were left out is not known (None). Per-step rows have no session times (None).
    `per_step` counts the steps of sessions alone: a line without a session (a batch line,
    a Mooncake line) is no step of one, so such lines get a row of their own,
    `no_session` (present when there are any), and never swell "step 0". `error_samples`
    (the distinct messages) and `error_counts` (each with its count) are in the order the
    errors first happened (error_counts)."""
    by_tenant: dict[str, list[RequestResult]] = defaultdict(list)
    by_step: dict[int, list[RequestResult]] = defaultdict(list)
    sessionless: list[RequestResult] = []
    for r in results:
        by_tenant[r.tenant].append(r)
        if r.session is None:
            sessionless.append(r)
        else:
            by_step[r.step_index].append(r)
    errors = error_counts(results)
    report = {"total": {**summarize(results), **send_lag(results)}, "wall_s": round(wall_s, 3),
              "per_tenant": {t: summarize(rs) for t, rs in sorted(by_tenant.items())},
              "per_step": {str(i): summarize(rs, sessions=False) for i, rs in sorted(by_step.items())},
              "error_samples": [e["error"] for e in errors], "error_counts": errors}
    if sessionless:
        report["no_session"] = summarize(sessionless, sessions=False)
    if any(r.service_tier for r in results):   # agents' requests apart from a batch's
        by_tier: dict[str, list[RequestResult]] = defaultdict(list)
        for r in results:
            by_tier[r.service_tier or "default"].append(r)
        report["per_tier"] = {tier: summarize(rs) for tier, rs in sorted(by_tier.items())}
    if num_planned is not None:
        report["interrupted"] = {"requests_left_out": max(0, num_planned - len(results))}
    elif interrupted:
        report["interrupted"] = {"requests_left_out": None}
    return report


_TABLE_COLUMNS = (
    # (key, heading, width, how a value reads)
    ("requests", "requests", 10, "{:d}"),
    ("errors", "errors", 8, "{:d}"),
    ("ttft_mean_s", "TTFT mean s", 13, "{:.3f}"),
    ("ttft_p50_s", "p50", 8, "{:.3f}"),
    ("ttft_p90_s", "p90", 8, "{:.3f}"),
    ("ttft_p99_s", "p99", 8, "{:.3f}"),
    ("itl_p50_s", "ITL p50 ms", 11, "ms"),
    ("request_e2e_p50_s", "request p50 s", 14, "{:.2f}"),
    ("session_e2e_p50_s", "session p50 s", 14, "{:.2f}"),
    ("cached_token_share", "cached", 8, "{:.1%}"),
)


def _cell(value, form: str, width: int) -> str:
    if value is None:
        text = "-"
    elif form == "ms":
        text = f"{value * 1000:.1f}"
    else:
        text = form.format(value)
    return f"{text:>{width}}"


MIN_GROUP_WIDTH = 16


def format_table(report: dict) -> str:
    """A readable table: total, then one row per tenant, per service tier (when some lines
    were flex), per step index of the sessions, and one for the lines without a session
    (when there are any). Seconds to the
    millisecond, inter-token latency in milliseconds, cached share in percent. A step row's
    session time is left out: its requests are one step of many sessions, not sessions.
    The group column is as wide as its longest label: every label is shown whole, so two
    tenants (or tiers) never share a row's name; widths are terminal columns (a wide
    character takes two: text_table.display_width), so the columns line up."""
    groups = [("total", report["total"], True)]
    groups += [(f"tenant {t}", s, True) for t, s in report["per_tenant"].items()]
    groups += [(f"tier {t}", s, True) for t, s in report.get("per_tier", {}).items()]
    groups += [(f"step {i}", s, False) for i, s in report["per_step"].items()]
    if "no_session" in report:
        groups.append(("no session", report["no_session"], False))
    width = max([MIN_GROUP_WIDTH] + [display_width(name) + 1 for name, _, _ in groups])
    header = f"{'group':<{width}}" + "".join(f"{h:>{w}}" for _, h, w, _ in _TABLE_COLUMNS)
    lines = [header, "-" * len(header)]

    def row(name: str, stats: dict, sessions: bool) -> str:
        return name + " " * (width - display_width(name)) + "".join(
            _cell(stats[k] if sessions or k != "session_e2e_p50_s" else None, form, w)
            for k, _, w, form in _TABLE_COLUMNS)

    lines.extend(row(name, stats, sessions) for name, stats, sessions in groups)
    if report["error_counts"]:   # in the order they first happened, each with its count
        lines.append("errors: " + "; ".join(f"{e['count']}× {e['error']}" for e in report["error_counts"]))
    if "interrupted" in report and report["interrupted"]["requests_left_out"] is None:
        lines.append("interrupted: stopped before the trace was read")
    elif "interrupted" in report:
        lines.append(f"interrupted: {report['interrupted']['requests_left_out']} requests left out "
                     "(aborted in flight or never sent)")
    return "\n".join(lines)
