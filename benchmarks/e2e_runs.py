"""The end-to-end benchmark's policy replays: each in a fresh process, in alternating order.

Two replays in one Python process are not independent. Measured on this machine with the
tiny model (4 tenants x 40 sessions, 911 requests): whichever policy ran second had a
6-25 % higher mean TTFT and spent 14-16 % more gateway CPU on the same work, in both
orders (LRU second: LRU / predictive mean TTFT 1.065; predictive second: 0.85 and 0.80).
So every replay runs in a process of its own (`run_isolated`, spawned: nothing is
inherited but the arguments), and with `repeats` > 1 the order alternates
(`policy_orders`); a policy's figures are then the medians over its runs
(`median_totals`), and the per-run ratios are kept beside them.
"""
from __future__ import annotations

import multiprocessing
import queue
import statistics
from collections.abc import Callable


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
