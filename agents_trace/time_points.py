"""A point in time as a person writes it for the trace tools' `since` / `until`: the CLI's
`--since` / `--until` and the trace API's `?since=` / `?until=` read it with one function.

Forms: a duration back from now (`90s`, `30m`, `2h`, `1.5d`), or an ISO date or date-time
(`2026-12-01`, `2026-12-01T14:30`, `2026-12-01T14:30Z`, `...+01:00`), one without an
offset in the local time of whoever reads it (the CLI's machine, the gateway's). The API
also takes Unix seconds (its first form, kept): a bare number there is seconds since
1970; on the command line it is refused, as `--since 30` more likely meant 30 minutes.
Invariant: the answer is finite Unix seconds, or ValueError; nothing is read as a default.
"""
from __future__ import annotations

import contextlib
import math
import re
from datetime import datetime

# what a `since` / `until` takes, for messages (the CLI adds nothing; the API adds Unix seconds)
TIME_POINT_FORMS = "a duration such as 30m, 2h or 7d, or a date such as 2026-12-01 or 2026-12-01T14:30"
MAX_UNIX_S = 1e12   # the API's bound on a time given as Unix seconds (year 33658)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_UNIX_S = re.compile(r"^\s*\d+(?:\.\d*)?(?:[eE][+-]?\d+)?\s*$")   # no sign, no nan/inf


def parse_time_point(text: str, now_s: float, *, unix_s_too: bool = False) -> float:
    """Unix seconds for `text`: a duration back from `now_s` or an ISO date / date-time
    (local time unless it names an offset); with `unix_s_too`, also a plain number of Unix
    seconds in [0, MAX_UNIX_S]. ValueError for anything else."""
    value = math.nan
    if unix_s_too and _UNIX_S.match(text):
        value = float(text) if 0 <= float(text) <= MAX_UNIX_S else math.nan
    elif match := _DURATION.match(text):
        value = now_s - float(match.group(1)) * _UNIT_S[match.group(2)]
    else:
        with contextlib.suppress(ValueError, OverflowError, OSError):   # no date, or none a clock can hold
            value = datetime.fromisoformat(text.strip()).timestamp()
    if not math.isfinite(value):
        raise ValueError(f"{text!r}: give {'Unix seconds, ' if unix_s_too else ''}{TIME_POINT_FORMS}")
    return value
