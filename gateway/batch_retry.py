"""When a batch request the gateway turned away goes again, and after how long.

Invariants: only a 429 or 503 is ever retried; one whose answer says waiting does not
cure it (`x-should-retry: false`, or `insufficient_quota`) is final at once; the wait is
the answer's `Retry-After` (1 s when absent or unreadable), at least 0.1 s; the runner
waits at most MAX_RETRY_WAIT_S of it at a time, so a batch looks again at least that often.
"""
from __future__ import annotations

import httpx

MAX_RETRY_WAIT_S = 30.0


def is_final_refusal(headers: httpx.Headers, body: object) -> bool:
    """A 429 or 503 that waiting does not cure: the answer says not to retry (a request
    past the tenant's tokens per minute), or the tenant's token budget is spent."""
    if headers.get("x-should-retry", "").strip().lower() == "false":
        return True
    return isinstance(body, dict) and isinstance(body.get("error"), dict) \
        and body["error"].get("code") == "insufficient_quota"


def retry_wait_s(status_code: int, headers: httpx.Headers, body: object) -> float | None:
    """Seconds to wait before sending the request again; None when its answer is final."""
    if status_code not in (429, 503) or is_final_refusal(headers, body):
        return None
    try:
        wait_s = float(headers.get("retry-after", "1"))
    except ValueError:
        wait_s = 1.0
    return max(0.1, wait_s)
