"""An upstream's wait before a retry, read from its headers and passed on to the client.

Invariants: the wait is its `retry-after-ms` (OpenAI sends it, its SDK reads it first),
else its `Retry-After` in seconds or as an HTTP date; it is passed on as whole seconds
rounded up, and as `retry-after-ms` when it sent that: never shorter than it asked (a
year at most, MAX_RETRY_AFTER_S: past any rate limit's window, the number only says "not
soon"); "1" only when it sent none that can be read. A negative number ("-5") is no
valid wait (RFC 9110: a non-negative integer of seconds, or an HTTP date), so it is read as
none (never "0", which would have clients retry at once); an HTTP date already past is 0.
"""
from __future__ import annotations

import math
import re
import time
from datetime import timezone
from email.utils import parsedate_to_datetime

MAX_RETRY_AFTER_S = 365 * 86400   # longer than any rate limit's window: the number only says "not soon"
_DELTA = re.compile(r"(-)?(\d+)(?:\.\d+)?")   # a Retry-After's number (a fraction read too, a minus seen)


def _seconds(text: str, unit_s: float) -> float | None:
    """A number of `unit_s` as seconds, 0 to MAX_RETRY_AFTER_S (one of thousands of digits
    too, without int() of them); None when `text` is no number or a negative one."""
    match = _DELTA.fullmatch(text.strip())
    if match is None:
        return None
    if match.group(1):   # "-4": no valid wait, as unreadable as "abc" (was: 0, a retry at once)
        return None
    if len(match.group(2)) > 15:
        return float(MAX_RETRY_AFTER_S)
    return min(float(MAX_RETRY_AFTER_S), float(match.group(0)) * unit_s)


def upstream_wait_s(retry_after: str | None, retry_after_ms: str | None = None, *,
                    now: float | None = None) -> float | None:
    """Seconds an upstream asked to wait, 0 to MAX_RETRY_AFTER_S: its `retry-after-ms` (OpenAI
    sends it, its SDK reads it first), else its `Retry-After` as seconds or as an HTTP date
    (RFC 9110: that time less `now`, the clock's by default); None when neither can be read."""
    if retry_after_ms is not None and (wait_s := _seconds(retry_after_ms, 0.001)) is not None:
        return wait_s
    if retry_after is None:
        return None
    if (wait_s := _seconds(retry_after, 1.0)) is not None:
        return wait_s
    try:
        until = parsedate_to_datetime(retry_after.strip()[:64])
    except (TypeError, ValueError, IndexError):
        return None
    if until.tzinfo is None:   # "-0000", asctime: an HTTP date is GMT
        until = until.replace(tzinfo=timezone.utc)
    left_s = until.timestamp() - (time.time() if now is None else now)
    return max(0.0, min(float(MAX_RETRY_AFTER_S), left_s))


def retry_after_headers(retry_after: str | None, retry_after_ms: str | None = None) -> dict[str, str]:
    """The client's headers for an upstream's wait (`upstream_wait_s`): `Retry-After` in whole
    seconds rounded up ("1" when none can be read), and `retry-after-ms` too when the upstream
    sent one that can be read."""
    wait_s = upstream_wait_s(retry_after, retry_after_ms)
    if wait_s is None:
        return {"Retry-After": "1"}
    headers = {"Retry-After": str(math.ceil(wait_s))}
    if retry_after_ms is not None and _seconds(retry_after_ms, 0.001) is not None:
        headers["retry-after-ms"] = str(math.ceil(wait_s * 1000))
    return headers
