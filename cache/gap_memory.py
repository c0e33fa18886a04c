"""What a gap forecaster has learned, and how it is kept across restarts (JSON, atomic).

`LearnedGaps` is every level's statistics of a `cache.gap_forecaster.GapForecaster` —
gap sums, return counts, the censored P(return) estimates of the last recount, and each
tenant's known waits — without the sessions waiting now (after a restart their next
request starts them afresh). Level keys are tuples of str / int / None, written as JSON
lists. `return_features` names which context features the return levels were split by;
a forecaster configured otherwise must not adopt them (`read_gaps` leaves that check to
`GapForecaster.adopt`).

Invariants: `write_gaps` replaces the file atomically (a crash leaves the previous one
whole); `read_gaps` accepts only `FORMAT` and raises ValueError on anything else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cache.atomic_file import replacing
from cache.gap_stats import LogGapStats, ReturnCounts

FORMAT = "stepahead-gaps/1"


@dataclass(slots=True)
class LearnedGaps:
    """A gap forecaster's statistics, by level key (copies: safe to keep and write)."""

    return_features: tuple[int, ...]
    gaps: dict[tuple, LogGapStats] = field(default_factory=dict)
    returns: dict[tuple, ReturnCounts] = field(default_factory=dict)
    p_estimates: dict[tuple, float] = field(default_factory=dict)
    steps: dict[str, set[str]] = field(default_factory=dict)


def _key(raw: list) -> tuple:
    if not isinstance(raw, list) or not all(v is None or isinstance(v, (str, int)) for v in raw):
        raise ValueError(f"not a level key: {raw!r}")
    return tuple(raw)


def gaps_to_json(learned: LearnedGaps) -> dict:
    return {
        "format": FORMAT,
        "return_features": list(learned.return_features),
        "gaps": [[list(k), s.num_gaps, s.sum_log, s.sum_log_sq] for k, s in learned.gaps.items()],
        "returns": [[list(k), c.num_returned, c.num_ended] for k, c in learned.returns.items()],
        "p_estimates": [[list(k), p] for k, p in learned.p_estimates.items()],
        "steps": {tenant: sorted(steps) for tenant, steps in learned.steps.items()},
    }


def gaps_from_json(data: dict) -> LearnedGaps:
    """The statistics in `data` (as `gaps_to_json` made it); ValueError if malformed."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    try:
        return LearnedGaps(
            return_features=tuple(int(i) for i in data["return_features"]),
            gaps={_key(k): LogGapStats(float(n), float(s), float(ss)) for k, n, s, ss in data["gaps"]},
            returns={_key(k): ReturnCounts(float(r), float(e)) for k, r, e in data["returns"]},
            p_estimates={_key(k): float(p) for k, p in data["p_estimates"]},
            steps={str(tenant): {str(s) for s in steps} for tenant, steps in data["steps"].items()},
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed {FORMAT} document: {exc!r}") from exc


def write_gaps(learned: LearnedGaps, path: str | Path) -> None:
    """Write `learned` to `path` atomically (a temporary file renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as stream:
        stream.write(json.dumps(gaps_to_json(learned), separators=(",", ":")))


def read_gaps(path: str | Path) -> LearnedGaps:
    """The statistics written at `path`; ValueError if it is not a gaps file."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    return gaps_from_json(data)
