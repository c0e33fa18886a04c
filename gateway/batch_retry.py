"""When a batch request the gateway turned away goes again, and after how long.

Invariants: only a 429 or 503 is ever retried, and a 400 `conversation_locked` (another
line, or an agent, runs a response on the conversation the line names: it takes one at a
time, gateway/conversation_locks.py); a 429 or 503 whose answer says waiting does not
cure it (`x-should-retry: false`, or `insufficient_quota`) is final at once; the wait is
the one the answer asks for (`retry-after-ms`, else `Retry-After` in seconds or as an HTTP
date: an upstream's wait, never cut to 1 s; 1 s when absent or unreadable), at least 0.1 s;
the runner sends again only once the whole wait has passed, looking (at a cancel, the
clock) at least every MAX_RETRY_WAIT_S, and a wait past the batch's window makes the answer
its result at once. A line its tenant's limiter kept waiting `queue_timeout_s` for a slot
(lines are served after the tenant's interactive requests: gateway/limits.py) is a 429
`rate_limit_exceeded` with `Retry-After`, so it goes again; `is_sent_again` applies the
rule to the gateway's own refusal (an `ApiError`).
"""
from __future__ import annotations

import httpx

from gateway.conversation_locks import CONVERSATION_LOCKED
from gateway.errors import ApiError
from gateway.retry_after import upstream_wait_s

MAX_RETRY_WAIT_S = 30.0


def is_final_refusal(headers: httpx.Headers, body: object) -> bool:
    """A 429 or 503 that waiting does not cure: the answer says not to retry (a request
    past the tenant's tokens per minute), or the tenant's token budget is spent
    (`insufficient_quota`: the tokens spent alone leave the request no room; a line over the
    budget only while other lines run is a `rate_limit_exceeded`, so it waits and goes again:
    gateway/budget_share.py)."""
    if headers.get("x-should-retry", "").strip().lower() == "false":
        return True
    return error_code(body) == "insufficient_quota"


def error_code(body: object) -> object:
    """The `code` of an OpenAI error body; None for anything else."""
    return body["error"].get("code") if isinstance(body, dict) and isinstance(body.get("error"), dict) else None


def retry_wait_s(status_code: int, headers: httpx.Headers, body: object) -> float | None:
    """Seconds to wait before sending the request again; None when its answer is final."""
    if status_code == 400 and error_code(body) == CONVERSATION_LOCKED:
        return 1.0
    if status_code not in (429, 503) or is_final_refusal(headers, body):
        return None
    wait_s = upstream_wait_s(headers.get("retry-after"), headers.get("retry-after-ms"))
    return max(0.1, 1.0 if wait_s is None else wait_s)


def is_sent_again(error: ApiError) -> bool:
    """Whether a batch line the gateway answered `error` is sent again (`retry_wait_s`):
    a refusal its runner retries is no answer the batch's owner sees (exchange.py counts
    it in no tenant's `stepahead_rejected_total`)."""
    return retry_wait_s(error.status, httpx.Headers(error.headers), error.body()) is not None
