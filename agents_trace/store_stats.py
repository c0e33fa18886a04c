"""Per-tenant figures over a time window of the trace store: what a platform team asks
first (who sends how much, how much of it the cache served, how fast, how well the
forecasts did).

Invariants: a step counts in the window when it arrived in it; the tenant scope is
explicit (None: every tenant, for an admin); the agent names the steps that ran as it
(as `--agent` picks the sessions holding one); tokens are those of steps a model ran (a
refused step counts as a step and an error, its never-processed prompt in no total, as
its chat span exports no usage); each tenant's row and the total are computed
from the same steps, percentiles over the steps that have the value (TTFT: steps that
produced a first token; tool gap: steps after tool results whose gap is known).
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents_trace.prompt_blocks import PreviousPrompt
from agents_trace.store_queries import contains_sql, read_store, where_sql
from agents_trace.step_queries import previous_prompt_before
from agents_trace.store_rows import REACHED_MODEL_SQL
from agents_trace.store_schema import has_column


@dataclass(frozen=True, slots=True)
class StatsWindow:
    """Which steps count: arrival in [since_s, until_s] (None: open), tenant, agent."""

    tenant: str | None = None
    agent: str | None = None
    agent_contains: str | None = None   # part of the agent's name, in any case (store_queries' `contains_sql`)
    since_s: float | None = None
    until_s: float | None = None


_SUMS = ("COUNT(DISTINCT tenant || char(0) || session) AS sessions, COUNT(*) AS steps, "
         "SUM(error IS NOT NULL) AS errors, SUM(after_kind = 'tools') AS steps_after_tools, "
         + ", ".join(f"COALESCE(SUM(CASE WHEN {REACHED_MODEL_SQL} THEN {column} END), 0) AS {name}"
                     for column, name in (("num_input_tokens", "prompt_tokens"), ("num_cached_tokens", "cached_tokens"),
                                          ("num_output_tokens", "output_tokens"))) + ", "
         "SUM(forecast IS NOT NULL) AS forecasts, "
         "COALESCE(SUM(forecast_hit), 0) AS forecast_hits, MIN(arrived_s) AS first_s, MAX(arrived_s) AS last_s")


def _where(window: StatsWindow) -> tuple[str, list]:
    """The steps' WHERE. A window bounds arrival on both sides, an open side by an infinity
    (the same steps): SQLite, with no statistics of the store, picks the arrival indexes
    (store_schema) for a range bounded on both sides, and the table's order for one bounded
    on one side only, reading every step however few arrived in the window."""
    window_s = (None if window.since_s is None and window.until_s is None else
                (-math.inf if window.since_s is None else window.since_s,
                 math.inf if window.until_s is None else window.until_s))
    return where_sql((("tenant = ?", window.tenant), ("agent = ?", window.agent),
                      (contains_sql("agent"), window.agent_contains),
                      ("arrived_s >= ? AND arrived_s <= ?", window_s)))


def _percentiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99])
    return round(float(p50), 6), round(float(p99), 6)


def _row(sums: dict, ttfts: list[float], gaps: list[float]) -> dict:
    out = dict(sums)
    out["cached_share"] = round(out["cached_tokens"] / out["prompt_tokens"], 4) if out["prompt_tokens"] else None
    out["ttft_p50_s"], out["ttft_p99_s"] = _percentiles(ttfts)
    out["tool_gap_p50_s"], out["tool_gap_p99_s"] = _percentiles(gaps)
    out["forecast_hit_rate"] = round(out["forecast_hits"] / out["forecasts"], 4) if out["forecasts"] else None
    return out


def tenant_stats(path: Path, window: StatsWindow, stop: threading.Event | None = None) -> dict:
    """`{"tenants": [row per tenant, by name], "total": row or None}`; a row holds
    sessions, steps, errors, steps_after_tools, prompt/cached/output tokens, cached_share,
    TTFT and tool-gap p50/p99 in seconds, forecasts and their hits, first_s / last_s, and
    from the prompt fingerprints: prefix_from_previous_tokens (what the latest successful
    step in its session to have ended by its arrival had of its prompt: `PreviousPrompt`),
    evicted_prefix_tokens (how much of that was no longer cached) and
    steps_with_evicted_prefix (a step whose previous prompt ended before its gateway
    started adds neither: `PreviousPrompt.reuse_in_walk`, `_count_reuse`).
    A session's first step in the window
    is compared with the session's last successful step before it, in the window or not.
    Once `stop` is set (its client left) it raises `StatsCancelled` within a chunk of
    steps (`_CHUNK_ROWS`) or a slice of a query (`_PROGRESS_STEPS`), with no figures."""
    try:
        return _tenant_stats(path, window, stop)
    except sqlite3.OperationalError as error:   # the progress handler cut a query short
        if stop is not None and stop.is_set() and "interrupted" in str(error):
            raise StatsCancelled() from None
        raise


class StatsCancelled(Exception):
    """`tenant_stats` stopped before its end because its `stop` was set."""


_CHUNK_ROWS = 256   # steps walked (and their fingerprints decoded, at once) between looks at `stop`
_PROGRESS_STEPS = 20_000   # SQLite instructions between looks at `stop` within a query


def _tenant_stats(path: Path, window: StatsWindow, stop: threading.Event | None) -> dict:
    condition, params = _where(window)
    with read_store(path) as db:
        if db is None:
            return {"tenants": [], "total": None}
        if stop is not None:
            db.set_progress_handler(stop.is_set, _PROGRESS_STEPS)
        per_tenant = {row["tenant"]: dict(row) for row in db.execute(
            f"SELECT tenant, {_SUMS} FROM steps{condition} GROUP BY tenant ORDER BY tenant", params)}
        ttfts: dict[str, list[float]] = {tenant: [] for tenant in per_tenant}
        gaps: dict[str, list[float]] = {tenant: [] for tenant in per_tenant}
        reuse = {tenant: dict.fromkeys(_REUSE_KEYS, 0) for tenant in per_tenant}
        walking: tuple[str, str] | None = None
        previous = PreviousPrompt()
        started = "gateway_started_s" if has_column(db, "steps", "gateway_started_s") else "NULL"   # not upgraded
        steps = db.execute(
            "SELECT tenant, session, idx, ttft_s, CASE WHEN after_kind = 'tools' THEN gap_s END, "
            f"num_cached_tokens, num_input_tokens, prompt_blocks, error, arrived_s, ended_s, {started} "
            f"FROM steps{condition} ORDER BY tenant, session, idx", params)
        for chunk in iter(lambda: steps.fetchmany(_CHUNK_ROWS), []):
            if stop is not None and stop.is_set():
                raise StatsCancelled()
            for (tenant, session, index, ttft_s, gap_s, num_cached, num_input, _, error, arrived_s,
                 ended_s, started_s), blocks in zip(chunk, _decoded_blocks(chunk)):
                if ttft_s is not None:
                    ttfts[tenant].append(ttft_s)
                if gap_s is not None:
                    gaps[tenant].append(gap_s)
                if walking != (tenant, session):
                    walking = (tenant, session)
                    previous = (previous_prompt_before(db, tenant, session, index, arrived_s) if index > 0
                                else PreviousPrompt())
                shared, evicted = previous.reuse_in_walk(
                    blocks, num_input, num_cached, error is None,
                    index=index, arrived_s=arrived_s, ended_s=ended_s, cache_since_s=started_s)
                if error is None:
                    _count_reuse(reuse[tenant], shared, evicted)
    rows = [_row(sums, ttfts[tenant], gaps[tenant]) | reuse[tenant] for tenant, sums in per_tenant.items()]
    if not rows:
        return {"tenants": [], "total": None}
    total_row = _row(_total_of(per_tenant.values()), [v for vs in ttfts.values() for v in vs],
                     [v for vs in gaps.values() for v in vs])
    total_row |= {key: sum(counts[key] for counts in reuse.values()) for key in _REUSE_KEYS}
    return {"tenants": rows, "total": total_row}


_BLOCKS, _ERROR = 7, 8   # where a walked step's prompt_blocks and error are


def _decoded_blocks(chunk: list[tuple]) -> list:
    """Each walked step's prompt fingerprints (None: none, or a failed step, whose prompt
    is never compared nor kept: `PreviousPrompt.reuse_in_walk`), decoded in one call."""
    wanted = [row[_BLOCKS] for row in chunk if row[_BLOCKS] and row[_ERROR] is None]
    decoded = iter(json.loads("[" + ",".join(wanted) + "]"))
    return [next(decoded) if row[_BLOCKS] and row[_ERROR] is None else None for row in chunk]


def _total_of(per_tenant: Iterable[dict]) -> dict:
    """The sums over every tenant's steps from each tenant's (`_SUMS`: a session is counted
    by tenant and id, so the tenants' session counts add up too)."""
    rows = list(per_tenant)
    total = {}
    for key in rows[0]:
        if key == "tenant":
            continue
        values = [row[key] for row in rows if row[key] is not None]
        pick = min if key == "first_s" else max if key == "last_s" else sum
        total[key] = pick(values) if values else None
    return total


_REUSE_KEYS = ("prefix_from_previous_tokens", "evicted_prefix_tokens", "steps_with_evicted_prefix")


def _count_reuse(counts: dict[str, int], shared: int | None, evicted: int | None) -> None:
    """Add one step: the tokens its session's previous step's prompt shared with it, and
    how many of those the cache no longer held (see step_queries' _add_reuse). A step whose
    eviction is unknown (`evicted` None: its previous prompt is unknown, or ended before its
    gateway started) adds nothing, as the live count adds nothing for it, so the evicted
    share is of tokens a cache could have kept."""
    if shared is None or evicted is None:
        return
    counts["prefix_from_previous_tokens"] += shared
    if evicted:
        counts["evicted_prefix_tokens"] += evicted
        counts["steps_with_evicted_prefix"] += 1
