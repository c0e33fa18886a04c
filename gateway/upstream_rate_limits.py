"""An upstream's 429s, told to the operator: one WARNING line a minute per model at most.

The tenant is answered in the gateway's words (`litellm_errors.upstream_rate_limited`):
the upstream's name the operator's organisation and what all tenants together used. Only
the operator can raise the account's limit, or see that one request is larger than it, so
the log quotes the upstream's own message (`UpstreamRateLimited.upstream_message`).

Invariants: of each model, at most one line per `interval_s` (60 s), every 429 either
logged or counted in the model's next line (`RepeatedFailures.warn`); a line names the
model and quotes the upstream's message as `one_line` left it (no upstream address, no
`Bearer` value) with the model's own key taken out (`litellm_errors.redacted`), escaped to
one printable line; never a tenant's key (the upstream never sees one), nor the tenant.
NOTE: not thread-safe, as RepeatedFailures: one per backend, used on the event loop.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from agents_trace.text_table import printable
from cache.repeated_failures import DEFAULT_INTERVAL_S, RepeatedFailures
from gateway.errors import ApiError
from gateway.litellm_errors import UpstreamRateLimited

log = logging.getLogger("stepahead.gateway")
LINE = "stepahead: upstream rate limit: model %s: the upstream answered 429: %s"


class UpstreamRateLimits:
    """The log of one model's upstream 429s (the module docstring)."""

    __slots__ = ("model_id", "_lines")

    def __init__(self, model_id: str, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model_id = model_id
        self._lines = RepeatedFailures(log, interval_s, clock)

    def note(self, error: ApiError) -> None:
        """Log `error` when it is an upstream's 429 (redacted already) and none of this
        model's was logged in the last `interval_s`; else count it, or, any other error, nothing."""
        if isinstance(error, UpstreamRateLimited):
            self._lines.warn("429", LINE, printable(self.model_id), printable(error.upstream_message))
