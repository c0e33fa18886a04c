"""Which request is a Batch API line, and how far its admission got: the batch runner
(gateway/batch_sending.py) sends each line in a `BATCH_LINE` context holding the line's
`BatchLineTurn`; the tenant's limiter (gateway/limits.py) reads it to serve the line after
the tenant's interactive requests, and marks it admitted.

Invariant: only the batch runner sets `BATCH_LINE` (no client can: it is no header), and a
turn's `is_admitted` only ever goes from False to True.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class BatchLineTurn:
    """A Batch API line's admission, shared by its sender and the tenant's limiter:
    `is_admitted` turns True (and stays) the moment the line holds a slot; until then the
    sender may give the line up (its batch cancelled) and nothing of it has run.
    `is_given_up` turns True when the sender cancels the line (its batch cancelled), so
    the app counts that cancel as a client that left (499), not as the shutdown's 503."""

    is_admitted: bool = False
    is_given_up: bool = False


# Set while the batch runner sends a Batch API line (gateway/batch_sending.py): the app's handler
# runs in the sending task (httpx's ASGI transport), so the line's admission sees it; no client can set it
BATCH_LINE: ContextVar[BatchLineTurn | None] = ContextVar("stepahead_batch_line", default=None)
