"""What a litellm exception says about an odd upstream reply, so that the litellm path
answers it as the passthrough path does (QA147).

Invariants: a 200 whose body is an OpenAI error object (`{"error": {...}}`) is named as such
(`error_in_200`), whatever status litellm made up for it (the error's `code`, else 422):
it is the upstream's fault, a 502 `upstream_error`, never a 4xx that tells the client (or
a batch) that its request was wrong. An error whose body is not JSON is named by its status
("HTTP 504", passthrough's words), never by the SDK's "Error code: 504" nor litellm's
"Timeout Error: OpenAIException - " around it (`own_words`). A chat stream request answered
200 with something other than SSE has its body read, a bounded start of it, so that an
error object in it is named by its message (`stream_body_start`, for
gateway/upstream_replies.py `require_sse`).
"""
from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from gateway.litellm_causes import upstream_words, wrapper_free

# litellm's message for an error object that carries none of its own (a string, a `code` alone)
LITELLM_ERROR_WORDS = "Error in response object"
# litellm's timeout words before a provider's: "litellm.Timeout: Timeout Error: OpenAIException - …"
_TIMEOUT_WORDS = re.compile(r"^(?:litellm\.\w+:\s*)*Timeout Error:\s*")
# the OpenAI SDK's whole message for an error status whose body it could not read as JSON
_SDK_STATUS_ONLY = re.compile(r"Error code:\s*(\d{3})")


def error_in_200(links: list[BaseException]) -> str | None:
    """The upstream's message when the chain (`litellm_causes.chain`) is litellm's answer to
    a 200 whose body is an error object (`litellm_200_error`); None for any other chain."""
    link = litellm_200_error(links)
    return None if link is None else said_in_200(link)


def litellm_200_error(links: list[BaseException]) -> Exception | None:
    """The link of the chain that is litellm's answer to a 200 whose body is an error
    object: a bare `Exception` it raises with the error's `code` (its own 422 when none) as
    `status_code` and the error's `message`; None when there is none."""
    return next((link for link in links
                 if type(link) is Exception and hasattr(link, "status_code") and hasattr(link, "message")), None)


def said_in_200(link: Exception) -> str:
    """`litellm_200_error`'s message: the error's own ("" where litellm put its own words)."""
    message = str(link.message or "")
    return "" if message == LITELLM_ERROR_WORDS else message


def own_words(exc: BaseException) -> str | None:
    """`litellm_causes.upstream_words`, with litellm's timeout words ("Timeout Error: ") also
    taken off, and "HTTP N" for the SDK's bare "Error code: N" (a body that is not JSON);
    None when `exc`'s text carries none of litellm's words."""
    words = upstream_words(exc)
    if words is None:
        said = str(getattr(exc, "message", None) or exc).strip()
        unwrapped = _TIMEOUT_WORDS.sub("", said)
        words = wrapper_free(unwrapped) if unwrapped != said else None
    bare = _SDK_STATUS_ONLY.fullmatch(words.strip()) if words is not None else None
    return f"HTTP {bare[1]}" if bare is not None else words


async def body_start(pieces: AsyncIterator[bytes] | None, num_bytes: int) -> bytes:
    """A reply's body from its `pieces` (None: none to read), read up to `num_bytes` and a
    piece; what was read when reading fails."""
    body = b""
    if pieces is None:
        return body
    try:
        async for piece in pieces:
            body += piece
            if len(body) > num_bytes:
                break
    except Exception:   # NOTE: a body that cannot be read is named by its content type
        pass
    return body


async def stream_body_start(stream: Any, num_bytes: int) -> bytes:
    """The body of the HTTP reply under an OpenAI SDK stream (litellm's raw chat stream, its
    httpx `response`), read as `body_start` reads it; b"" when there is none to read."""
    pieces = getattr(getattr(stream, "response", None), "aiter_bytes", None)
    return await body_start(None if pieces is None else pieces(), num_bytes)
