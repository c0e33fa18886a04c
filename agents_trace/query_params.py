"""The trace API's query parameters: numbers in a range, booleans, points in time, pages,
list cursors.

Invariant: a value that is not what its parameter takes is a 400 naming the parameter
(`param`, `code: "invalid_value"`, carried into OpenAI's error shape by the gateway),
never FastAPI's 422 and never silently read as a default; an absent or empty one is the
default.
"""
from __future__ import annotations

import base64
import json
import math
import re
import time

from fastapi import HTTPException, Request

from agents_trace.store_queries import MAX_PAGE
from agents_trace.time_points import MAX_UNIX_S, TIME_POINT_FORMS, parse_time_point

NUMBER_TEXT = r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"   # what a query's number may be written as
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def _bad_value(name: str, expected: str, raw: str, code: str = "invalid_value") -> HTTPException:
    """The 400 for a query parameter (never FastAPI's 422 shape); its detail carries
    `message`, `param` and `code`, which the gateway's error body keeps (OpenAI's shape)."""
    return HTTPException(400, {"message": f"Query parameter '{name}' must be {expected}, not {raw!r}.",
                               "param": name, "code": code})


def bound_code(value: float | None, low: float, high: float, is_int: bool) -> str:
    """OpenAI's code for a number outside [low, high] (`integer_above_max_value`,
    `decimal_below_min_value`, ...); `invalid_value` for one that is no number (None)."""
    if value is None or low <= value <= high:
        return "invalid_value"
    return f"{'integer' if is_int else 'decimal'}_{'above_max' if value > high else 'below_min'}_value"


def _bound(value: float) -> str:
    """A range's end as written: a whole number in full (`4611686018427387904`, never
    `4.61169e+18`), any other in the shortest form."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def query_number(request: Request, name: str, default: float | None, *, low: float,
                 high: float, is_int: bool = False) -> float | None:
    """A numeric query parameter in [low, high], `default` when absent or empty, or a 400
    naming it."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:   # NOTE: `int()` and `float()` also take "1_0", " 5" and other scripts' digits (QA143)
        value = (int(raw) if is_int else float(raw)) if re.fullmatch(NUMBER_TEXT, raw) else None
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise _bad_value(name, f"a number in [{_bound(low)}, {_bound(high)}]", raw, bound_code(value, low, high, is_int))
    return value


def query_time(request: Request, name: str, now_s: float | None = None) -> float | None:
    """A point in time (`since`, `until`) as Unix seconds, None when absent or empty, or a
    400 naming it: Unix seconds, or what the CLI's `--since` takes (`2h`, `2026-12-01`:
    time_points, the one parser of both), back from `now_s` (default: now)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return parse_time_point(raw, time.time() if now_s is None else now_s, unix_s_too=True)
    except ValueError:
        raise _bad_value(name, f"Unix seconds in [0, {_bound(MAX_UNIX_S)}], {TIME_POINT_FORMS}", raw) from None


def query_flag(request: Request, name: str) -> bool:
    """A boolean query parameter: true/1/yes/on or false/0/no/off in any case, False when
    absent or empty, or a 400 naming it (anything else was once silently false)."""
    raw = request.query_params.get(name)
    word = (raw or "").strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS or not word:
        return word in TRUE_WORDS
    raise _bad_value(name, "true or false (also 1/0, yes/no, on/off)", raw)


def query_page(request: Request, default_limit: int) -> tuple[int, int]:
    """(limit, offset) of a page: `limit` from 1 to MAX_PAGE (else `default_limit`), `offset` from 0."""
    limit = query_number(request, "limit", default_limit, low=1, high=MAX_PAGE, is_int=True)
    offset = query_number(request, "offset", 0, low=0, high=2**62, is_int=True)
    return int(limit), int(offset)


def list_cursor(session: dict) -> str:
    """The cursor of a sessions list's row: its sort key (last_s, tenant, session) as
    base64url JSON, opaque to the caller; `query_cursor` reads it back exactly (a float's
    JSON form is its exact value)."""
    key = json.dumps([session["last_s"], session["tenant"], session["session"]])   # ASCII: any id
    return base64.urlsafe_b64encode(key.encode("ascii")).decode("ascii").rstrip("=")


def query_cursor(request: Request, name: str) -> tuple[float, str, str] | None:
    """The sort key a `list_cursor` query parameter carries, None when absent or empty, or
    a 400 naming it (anything a list did not make: not base64url JSON of a finite number
    and two strings)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        key = json.loads(base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_", validate=True))
        last_s = float(key[0]) if isinstance(key, list) and type(key[0]) in (int, float) else math.nan
    except (ValueError, RecursionError, OverflowError, IndexError):   # bad base64, UTF-8, JSON; no key
        key, last_s = None, math.nan
    if not (math.isfinite(last_s) and len(key) == 3 and isinstance(key[1], str) and isinstance(key[2], str)):
        raise _bad_value(name, "the next_before of a page of the list", raw)
    return last_s, key[1], key[2]
