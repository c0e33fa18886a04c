"""The end-to-end benchmark's policy replays: each in a fresh process, in alternating order.

Two replays in one Python process are not independent. Measured on this machine with the
tiny model (4 tenants x 40 sessions, 911 requests): whichever policy ran second had a
6-25 % higher mean TTFT and spent 14-16 % more gateway CPU on the same work, in both
orders (LRU second: LRU / predictive mean TTFT 1.065; predictive second: 0.85 and 0.80).
So every replay runs in a process of its own (`run_isolated`, spawned: nothing is
inherited but the arguments), and with `repeats` > 1 the order alternates
(`policy_orders`); a policy's figures are then the medians over its runs
(`median_totals`), and the per-run ratios are kept beside them (`ratios`: None where a
policy has no figure to divide). A policy whose every request failed ends the benchmark
with one line (`failed_requests`): there is nothing to compare.
"""
from __future__ import annotations

import multiprocessing
import queue
import statistics
import sys
from collections.abc import Callable

if __name__ == "__main__":
    print("error: e2e_runs.py is a helper module, not a benchmark: "
          "it is used by bench_e2e.py, bench_dtype.py and e2e_capacity.py; run one of those", file=sys.stderr)
    sys.exit(2)


def policy_orders(policies: list[str], repeats: int) -> list[list[str]]:
    """The order of the policies in each repeat: as given, then reversed, alternately."""
    return [list(policies) if i % 2 == 0 else list(reversed(policies)) for i in range(max(1, repeats))]


def _child(run: Callable[..., dict], args: tuple, results) -> None:
    try:
        results.put(("ok", run(*args)))
    except BaseException as exc:  # NOTE: reported to the parent, which raises it
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def run_isolated(run: Callable[..., dict], *args) -> dict:
    """`run(*args)` in a freshly spawned process (not a daemon: it starts its own
    workers); its return value, or RuntimeError with the child's error or exit code."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_child, args=(run, args, results), name="bench-replay")
    process.start()
    try:
        while True:
            try:
                status, value = results.get(timeout=1.0)
                break
            except queue.Empty:
                if not process.is_alive() and results.empty():
                    raise RuntimeError(f"the replay process died (exit code {process.exitcode})") from None
    finally:
        process.join()
    if status != "ok":
        raise RuntimeError(f"the replay process failed: {value}")
    return value


def median_totals(totals: list[dict]) -> dict:
    """Field by field, the median over runs of the numeric fields (None where any run
    has None); other fields from the first run."""
    out = {}
    for key, first in totals[0].items():
        values = [t.get(key) for t in totals]
        if isinstance(first, (int, float)) and not isinstance(first, bool):
            out[key] = None if any(v is None for v in values) else round(statistics.median(values), 6)
        else:
            out[key] = first
    return out


def median_run(reports: list[dict]) -> dict:
    """The run whose mean TTFT is the median (the lower middle one for an even count)."""
    ordered = sorted(reports, key=lambda r: r["total"]["ttft_mean_s"] or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def failed_requests(policy: str, total: dict, samples: list[str]) -> None:
    """Exit with one line when every request of a policy's run failed (nothing to compare:
    a misconfigured model, prompts past the context); say on stderr how many failed when
    some did (the policy's figures then cover only the others)."""
    if total["requests"] and total["errors"] == total["requests"]:
        sys.exit(f"bench_e2e: every one of the {total['requests']} requests of the {policy} run failed: "
                 + "; ".join(samples))
    if total["errors"]:
        print(f"bench_e2e: {total['errors']} of {total['requests']} requests of the {policy} run failed (its "
              f"figures cover the others): " + "; ".join(samples), file=sys.stderr)


def _ratio(totals: dict, over: str, under: str, key: str) -> float | None:
    """totals[over][key] / totals[under][key], rounded; None when either is missing or 0."""
    numerator, denominator = totals[over].get(key), totals[under].get(key)
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def ratios(totals: dict) -> dict:
    out = {}
    if "predictive" in totals and "lru" in totals:
        for key, name in (("ttft_mean_s", "ttft_mean"), ("ttft_p99_s", "ttft_p99"),
                          ("session_e2e_p50_s", "session_e2e_p50")):
            out[f"lru_over_predictive_{name}"] = _ratio(totals, "lru", "predictive", key)
    for anchor in ("ttl", "kvflow"):
        if anchor in totals and "predictive" in totals:
            out[f"{anchor}_over_predictive_ttft_mean"] = _ratio(totals, anchor, "predictive", "ttft_mean_s")
            out[f"{anchor}_over_predictive_ttft_p99"] = _ratio(totals, anchor, "predictive", "ttft_p99_s")
        if anchor in totals and "lru" in totals:
            out[f"lru_over_{anchor}_ttft_mean"] = _ratio(totals, "lru", anchor, "ttft_mean_s")
    if "none" in totals and "lru" in totals:
        out["none_over_lru_ttft_mean"] = _ratio(totals, "none", "lru", "ttft_mean_s")
    return out

