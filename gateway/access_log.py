"""The access log without secrets: a client that puts its API key in the URL's query
(`?api_key=sk-...`; refused, OpenAI reads keys from the Authorization header only) must not
find it written in plain text to uvicorn's access log.

Invariant: a logged request line keeps its path and every query parameter's name; the
value of each parameter whose name reads as a credential (`SECRET_NAME_PARTS`) is
replaced by `REDACTED`. Nothing else in the record changes.
"""
from __future__ import annotations

import logging
from urllib.parse import unquote_plus

SECRET_NAME_PARTS = ("key", "token", "secret", "password", "auth", "signature", "credential")
REDACTED = "[redacted]"
ACCESS_LOGGER = "uvicorn.access"
_PATH_ARG = 2   # uvicorn's access record: (client address, method, full path, HTTP version, status)


def redacted_path(full_path: str) -> str:
    """`full_path` with the values of credential-named query parameters replaced."""
    path, mark, query = full_path.partition("?")
    if not mark:
        return full_path
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        secret = equals and any(word in unquote_plus(name).lower() for word in SECRET_NAME_PARTS)
        parts.append(f"{name}={REDACTED}" if secret else part)
    return f"{path}?{'&'.join(parts)}"


class QueryRedaction(logging.Filter):
    """A filter for uvicorn's access logger (see the module's invariant)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > _PATH_ARG and isinstance(args[_PATH_ARG], str):
            record.args = args[:_PATH_ARG] + (redacted_path(args[_PATH_ARG]),) + args[_PATH_ARG + 1:]
        return True


def redact_access_log() -> None:
    """Install `QueryRedaction` on uvicorn's access logger once (after uvicorn configured
    its logging, which would otherwise replace the logger's settings)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, QueryRedaction) for f in logger.filters):
        logger.addFilter(QueryRedaction())
