"""What a gap forecaster has learned, and how it is kept across restarts (JSON, atomic).

`LearnedGaps` is every level's statistics of a `cache.gap_forecaster.GapForecaster` —
gap sums, return counts, the censored P(return) estimates of the last recount, and each
tenant's known waits — without the sessions waiting now (after a restart their next
request starts them afresh). Level keys are tuples of str / int / None, written as JSON
lists. `return_features` names which context features the return levels were split by;
a forecaster configured otherwise must not adopt them (`read_gaps` leaves that check to
`GapForecaster.adopt`).

Invariants: `write_gaps` replaces the file atomically (a crash leaves the previous one
whole) and never writes a number that is not finite (ValueError before the file is
touched); `read_gaps` accepts only `FORMAT` and raises ValueError on anything else, a
document holding a number that is not finite (NaN, infinity, or one too large for a
float), a negative count or sum of squares, or a P(return) outside [0, 1] among them
(such a file is damaged: the forecasts it gave would be NaN, and confident), and one whose
sums no gaps could make: a count past `MAX_COUNT`, a sum of log gaps outside
count x [log MIN_GAP_S, log MAX_GAP_S], a sum of squares past count x the largest
square or below what the sum makes (sum² / count), or a return feature that is no whole number (QA131: finite but absurd sums
made every forecast of the tenant raise OverflowError).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cache.atomic_file import replacing
from cache.gap_stats import MAX_GAP_S, MIN_GAP_S, LogGapStats, ReturnCounts

FORMAT = "stepahead-gaps/1"
MAX_COUNT = 2.0 ** 53   # counts are whole floats: no forecaster counts past this
MIN_LOG_GAP, MAX_LOG_GAP = math.log(MIN_GAP_S), math.log(MAX_GAP_S)   # what one learned gap adds (QA143)
ROUNDING = 1.0 + 1e-9   # a sum added up gap by gap may pass count x bound by rounding


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


def _number(value: object, what: str, low: float = -math.inf, high: float = math.inf) -> float:
    """`value` as a float, if it is a finite JSON number in [low, high]; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is not a number: {value!r}")
    try:
        number = float(value)
    except OverflowError:   # an integer past what a float holds
        raise ValueError(f"holds a number too large for a float ({what})") from None
    if not math.isfinite(number):
        raise ValueError(f"holds a non-finite number ({what} {value!r})")
    if not low <= number <= high:
        raise ValueError(f"{what} {value!r} is outside [{low}, {high}]")
    return number


def _whole(value: object, what: str) -> int:
    number = _number(value, what, 0.0, MAX_COUNT)
    if not number.is_integer():
        raise ValueError(f"{what} {value!r} is not a whole number")
    return int(number)


def _gap_stats(num: object, sum_log: object, sum_log_sq: object) -> LogGapStats:
    """The sums of `num` log gaps, each in [MIN_LOG_GAP, MAX_LOG_GAP], else ValueError."""
    n = _number(num, "a gap count", 0.0, MAX_COUNT)
    total = _number(sum_log, "a sum of log gaps", n * MIN_LOG_GAP * ROUNDING, n * MAX_LOG_GAP * ROUNDING)
    largest_square = max(MIN_LOG_GAP ** 2, MAX_LOG_GAP ** 2)
    least = total * total / n / ROUNDING - 1e-9 if n > 0 else 0.0   # Cauchy-Schwarz: n x sum of squares >= sum²
    return LogGapStats(n, total, _number(sum_log_sq, "a sum of squared log gaps", max(0.0, least),
                                         n * largest_square * ROUNDING))


def gaps_from_json(data: dict) -> LearnedGaps:
    """The statistics in `data` (as `gaps_to_json` made it); ValueError if malformed or
    holding a number no forecaster writes (not finite; a negative count; a P outside [0, 1])."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    try:
        return LearnedGaps(
            return_features=tuple(_whole(i, "a return feature") for i in data["return_features"]),
            gaps={_key(k): _gap_stats(n, s, ss) for k, n, s, ss in data["gaps"]},
            returns={_key(k): ReturnCounts(_number(r, "a return count", 0.0, MAX_COUNT),
                                           _number(e, "an end count", 0.0, MAX_COUNT))
                     for k, r, e in data["returns"]},
            p_estimates={_key(k): _number(p, "a P(return)", 0.0, 1.0) for k, p in data["p_estimates"]},
            steps={str(tenant): {str(s) for s in steps} for tenant, steps in data["steps"].items()},
        )
    except (KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(f"malformed {FORMAT} document: {exc!r}") from exc


def gaps_text(learned: LearnedGaps) -> str:
    """The JSON that `write_gaps` writes for `learned`; ValueError if it holds a number
    that is not finite (never written: a file holding one is read as damaged)."""
    return json.dumps(gaps_to_json(learned), separators=(",", ":"), allow_nan=False)


def write_gaps(learned: LearnedGaps, path: str | Path) -> None:
    """Write `learned` to `path` atomically (a temporary file renamed over it); ValueError,
    with the file untouched, if it holds a number that is not finite."""
    text = gaps_text(learned)   # a NaN raises here, before the file is replaced
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as stream:
        stream.write(text)


def read_gaps(path: str | Path) -> LearnedGaps:
    """The statistics written at `path`; ValueError if it is not a gaps file."""
    def non_finite(constant: str) -> float:
        raise ValueError(f"holds a non-finite number ({constant})")

    try:
        data = json.loads(Path(path).read_text(), parse_constant=non_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    except RecursionError:   # JSON nested past what the parser follows: no gaps file is
        raise ValueError(f"{path}: JSON nested too deeply") from None
    return gaps_from_json(data)
