"""The access log without secrets: a client that puts its API key in the URL's query
(`?api_key=sk-...`; refused, OpenAI reads keys from the Authorization header only) or path
must not find it written in plain text to uvicorn's access log.

Invariant: a logged request line keeps its path and every query parameter's name; the
value of each parameter whose name reads as a credential (`is_secret_name`), or whose
value (percent-decoded) holds something shaped like a key (`sk-` and at least
MIN_KEY_CHARS key characters, or `Bearer <token>`: `looks_like_key`), is replaced by
`REDACTED`, as is each path segment, and each query part without a value, that holds
one (there is no name to keep: the key is the part). Nothing else in the record changes.
The filter runs first on its logger (`redact_access_log`), so it does not matter
whether litellm, whose own filter rewrites such lines its own way, was imported.
"""
from __future__ import annotations

import logging
import re
from urllib.parse import unquote, unquote_plus

# a parameter name reads as a credential when one of its words (split at anything but a
# letter or digit) is one of these or ends in one of SECRET_WORD_ENDS: `api_key`, `apikey`,
# `access_token`, `auth`, not `author`, `max_tokens` or `monkey_bars`... (`monkey` is, harmlessly)
SECRET_WORDS = frozenset({"auth", "authorization", "signature", "sig", "credential", "credentials", "pwd",
                          "passwd", "bearer"})
SECRET_WORD_ENDS = ("key", "token", "secret", "password")
REDACTED = "[redacted]"
ACCESS_LOGGER = "uvicorn.access"
MIN_KEY_CHARS = 8   # after `sk-`: "sk-" + 8 of [A-Za-z0-9_-] (the gateway's own keys have 24+)
_PATH_ARG = 2   # uvicorn's access record: (client address, method, full path, HTTP version, status)
# not inside a word ("task-sk-12345678", "build_sk-release01"): an `sk-` key, or a bearer
# token (`Bearer` and MIN_KEY_CHARS token characters or more: not "bearer of news")
_KEY_SHAPE = re.compile(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{%d}|(?i:\bbearer\s+[A-Za-z0-9._~+/=\-]{%d})"
                        % (MIN_KEY_CHARS, MIN_KEY_CHARS))


def is_secret_name(name: str) -> bool:
    """Whether a query parameter's (decoded) name reads as a credential's (SECRET_WORDS)."""
    return any(word in SECRET_WORDS or word.endswith(SECRET_WORD_ENDS)
               for word in re.split(r"[^a-z0-9]+", name.lower()) if word)


def looks_like_key(text: str) -> bool:
    """Whether `text` (decoded) holds an `sk-` key or a `Bearer` token anywhere."""
    return _KEY_SHAPE.search(text) is not None


def _redacted_part(part: str) -> str:
    name, equals, value = part.partition("=")
    if not equals:
        return REDACTED if looks_like_key(unquote_plus(part)) else part
    if looks_like_key(unquote_plus(name)):
        return REDACTED
    secret = is_secret_name(unquote_plus(name)) or looks_like_key(unquote_plus(value))
    return f"{name}={REDACTED}" if secret else part


def redacted_path(full_path: str) -> str:
    """`full_path` with credentials replaced (see the module's invariant)."""
    path, mark, query = full_path.partition("?")
    if looks_like_key(unquote(path)):
        path = "/".join(REDACTED if looks_like_key(unquote(segment)) else segment
                        for segment in path.split("/"))
    if not mark:
        return path
    return f"{path}?{'&'.join(_redacted_part(part) for part in query.split('&'))}"


class QueryRedaction(logging.Filter):
    """A filter for uvicorn's access logger (see the module's invariant)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > _PATH_ARG and isinstance(args[_PATH_ARG], str):
            record.args = args[:_PATH_ARG] + (redacted_path(args[_PATH_ARG]),) + args[_PATH_ARG + 1:]
        return True


def redact_access_log() -> None:
    """Install `QueryRedaction` on uvicorn's access logger once (after uvicorn configured
    its logging, which would otherwise replace the logger's settings), ahead of any filter
    already there (litellm's, when an upstream model imported it), so that what those see
    is already redacted and a parameter keeps its name."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, QueryRedaction) for f in logger.filters):
        logger.filters.insert(0, QueryRedaction())
