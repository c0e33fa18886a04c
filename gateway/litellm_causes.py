"""What a litellm exception says about the upstream behind it, read from the exception
and the ones it wraps (its chain: `__cause__`, `__context__`, `original_exception`): the
upstream's status, error object, own words, wait (`retry_after_of`) and connection.

Invariants: the upstream's status is the HTTP status the upstream itself answered, never
the one litellm chose by the words of its message (litellm raises a `RateLimitError`, 429,
for any text saying "Request too large", an `InternalServerError`, 500, for one saying "The
server had an error processing your request", whatever the upstream's 400 or 413): a link
of the chain outside litellm's own exception classes that holds a reply's status is read
first. An error object that came with no error status (a stream's error event: the OpenAI
SDK's `APIError` holding it as `body`) stands for the status its `code` and `type` give
(`error_object_status`: a rate limit 429, any other 502), the one rule of both paths; never
for one its words suggest, nor for the one litellm then chose by them. A connection that could not be made (refused, DNS, TLS, proxy) is told apart from
one that broke off after the upstream answered (litellm's `MidStreamFallbackError`, or an
error reading a body): only the first is "unreachable", whatever litellm calls the second
(it wraps both in `APIConnectionError` "Connection error."). `wrapper_free` takes litellm's
words off a message ("MidStreamFallbackError: APIConnectionError: OpenAIException - ",
"Error code: 503 - ", "Timeout: APITimeoutError - ", nested ones too) and leaves an unknown
exception's text ("RuntimeError: boom") as it is. A reply that could not be read as JSON
(`not_json`) is told by the parser's error in the chain, never named in the parser's words.
"""
from __future__ import annotations

import json
import re
from typing import Any

TIMEOUT_NAMES = ("Timeout", "APITimeoutError", "TimeoutError", "ServerTimeoutError",
                 "ConnectionTimeoutError", "SocketTimeoutError", "ReadTimeout", "ConnectTimeout")
# a connection that was never made: refused, a name that does not resolve, TLS, a proxy
CONNECT_NAMES = ("ConnectError", "ConnectionRefusedError", "ClientConnectorError", "ClientConnectorDNSError",
                 "ClientConnectorCertificateError", "ClientConnectorSSLError", "ClientProxyConnectionError",
                 "gaierror")
# words for a connection failure that say nothing of when it failed (litellm's and the
# OpenAI SDK's "Connection error.")
VAGUE_CONNECTION_NAMES = ("APIConnectionError", "ClientConnectionError", "ClientOSError")
# a reply that stopped coming after the upstream had the request: a stream litellm gave up
# on, a body that could not be read to its end, a connection the upstream closed without an
# answer ("Server disconnected": it may have worked on the request for seconds, so it is
# no connection never made, which charges nothing: QA101)
BROKEN_OFF_NAMES = ("MidStreamFallbackError", "ReadError", "ClientPayloadError", "TransferEncodingError",
                    "ContentLengthError", "IncompleteRead", "ServerDisconnectedError", "RemoteProtocolError")
# Python's own errors at the root of a chain: litellm failed to read a reply whose shape
# it did not expect (a stream chunk that is a JSON list: "'list' object has no attribute
# 'choices'"), not an answer of the upstream's
PARSE_ERRORS = (AttributeError, TypeError, KeyError, IndexError)
# an error object's `code` or `type` that says it is a rate limit: OpenAI's code (its per-minute
# limits, and one request too large for them), and the type OpenAI-style servers give it; and
# the code OpenRouter numbers it with (a number, or that number as a string)
RATE_LIMIT_WORDS = ("rate_limit_exceeded", "rate_limit_error")
RATE_LIMIT_CODES = (429, "429")
_LITELLM_EXCEPTIONS = "litellm.exceptions"   # the module of litellm's own (status-choosing) classes
LITELLM_CONNECTION_ERROR = "Connection error."   # the OpenAI SDK's words for any transport failure
# litellm's words before a provider's own: "litellm.X: ", "XError: ", "OpenAIException - ",
# "Text-completion-openaiException - ", "APITimeoutError - ", then the SDK's "Error code: 503 - "
_WRAPPER = re.compile(r"^(?:litellm\.\w+:\s*|\w+Error:\s*|Timeout:\s*)*"
                      r"(?:[\w\-]+Exception|APITimeoutError)\s+-\s+(?:Error code:\s*\d+\s+-\s+)?")
_LITELLM_NAME = re.compile(r"^(?:litellm\.\w+:\s*)+")
_ERROR_STR = " Error_str: "   # litellm's timeout: "Request timed out. Error_str: <the SDK's words>"
# what litellm adds to a whole reply's timeout: " - timeout value=3.0, time taken=3.01 seconds"
_TIMEOUT_TIMES = re.compile(r" - timeout value=[^,]*, time taken=\S* seconds\s*$")
_ORIGINAL = " Original exception: "   # MidStreamFallbackError repeats what it wraps


def chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it wraps, outermost first (8 at most)."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen and len(seen) < 8:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "original_exception", None)
    return seen


def is_unreadable_reply(links: list[BaseException]) -> bool:
    """Whether the chain (`chain`) ends in Python's own error reading a reply (`PARSE_ERRORS`)."""
    return bool(links) and type(links[-1]) in PARSE_ERRORS


def not_json(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it wraps, is the JSON parser's: a reply (a whole body,
    a stream's event) that is not JSON, on either path."""
    return any(isinstance(link, json.JSONDecodeError) for link in chain(exc))


def error_body(exc: BaseException) -> dict:
    """The upstream's OpenAI error object behind a litellm exception (`body` of it, or of
    an exception it wraps), {} when there is none."""
    return next((body for link in chain(exc) if (body := _error_object(link)) is not None), {})


def error_object_status(error: dict) -> int:
    """The status an upstream's error object that came with no error status stands for (a
    stream's error event, a 200 whose body is one): 429 when it is a rate limit (its `code`
    or `type` is one of RATE_LIMIT_WORDS, or its `code` is 429, a number or a string), so that
    it is answered as an upstream's 429 is (`litellm_errors.map_upstream_status`: the gateway's
    words, an account out of credit the operator's 503); any other, 502. Its message's words
    are never read: "rate limit" in a `server_error`'s text is the upstream's server error."""
    code = error.get("code")
    named = any(isinstance(value, str) and value in RATE_LIMIT_WORDS for value in (code, error.get("type")))
    return 429 if named or code in RATE_LIMIT_CODES else 502


def _error_object(link: BaseException) -> dict | None:
    """The error object a link holds as its `body` (`{"error": {...}}` or the object), if any."""
    body = getattr(link, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    return body if isinstance(body, dict) and body else None


def text_field(error: dict, name: str) -> str | None:
    value: Any = error.get(name)
    return value if isinstance(value, str) and value else None


def _http_status(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599 else None


def upstream_status(exc: BaseException) -> int | None:
    """The HTTP error status the upstream answered: the innermost link that holds one (its
    `status_code`, else its reply's; for an error object with no status, a stream's error
    event, the one it stands for: `error_object_status`), litellm's own classes left out
    (they state the status litellm chose by the message's words; their `provider_status_code`
    is read), else `exc.status_code` (litellm's, for a failure with no reply behind it)."""
    for link in reversed(chain(exc)):
        if type(link).__module__.startswith(_LITELLM_EXCEPTIONS):
            found = _http_status(getattr(link, "provider_status_code", None))
        else:
            found = (_http_status(getattr(link, "status_code", None))
                     or _http_status(getattr(getattr(link, "response", None), "status_code", None)))
            if found is None and (error := _error_object(link)) is not None:
                found = error_object_status(error)
        if found is not None:
            return found
    return getattr(exc, "status_code", None)


def is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or type(exc).__name__ in TIMEOUT_NAMES


def _never_connected(link: BaseException) -> bool:
    return type(link).__name__ in CONNECT_NAMES or isinstance(link, ConnectionRefusedError)


def _vague_connection_failure(link: BaseException) -> bool:
    name = type(link).__name__
    # litellm wraps openai's APIConnectionError ("Connection error.") in InternalServerError
    return (name in VAGUE_CONNECTION_NAMES or "Connect" in name or isinstance(link, ConnectionError)
            or (name == "InternalServerError" and str(link).rstrip().endswith(LITELLM_CONNECTION_ERROR)))


def broke_off(exc: BaseException) -> bool:
    """Whether a link says the upstream's reply stopped coming after it had answered (a
    stream cut, or a chunk litellm could not read: `MidStreamFallbackError`)."""
    return any(type(link).__name__ in BROKEN_OFF_NAMES for link in chain(exc))


def is_unreachable(exc: BaseException) -> bool:
    """The gateway could not open a connection to the upstream: a link names a failure to
    connect; or a vague one ("Connection error.") wraps nothing more telling (its innermost
    link is itself a connection failure) and no link says the reply had begun."""
    links = chain(exc)
    if any(_never_connected(link) for link in links):
        return True
    if broke_off(exc):
        return False
    return any(_vague_connection_failure(link) for link in links) and _vague_connection_failure(links[-1])


def wrapper_free(text: str) -> str:
    """`text` (a litellm exception's message) without litellm's words around the provider's
    own: its class names and "OpenAIException - " prefixes (nested ones too), the SDK's "Error
    code: N - ", a timeout's first sentence repeated before "Error_str:" (a text completion's
    timeout wraps litellm's whole timeout text in another: each is taken off) and the
    times it adds after a whole reply's (" - timeout value=3.0, time taken=3.01 seconds":
    every timeout reads alike, streamed or not, QA229), and the "Original exception: …" a
    `MidStreamFallbackError` adds. A text without litellm's provider marker
    ("<provider>Exception - ") keeps its class names."""
    text = text.split(_ORIGINAL, 1)[0]
    while True:
        while (stripped := _WRAPPER.sub("", text, count=1)) != text:
            text = _LITELLM_NAME.sub("", stripped)
        if _ERROR_STR not in text:
            return _TIMEOUT_TIMES.sub("", text)
        text = text.split(_ERROR_STR, 1)[1]


def upstream_words(exc: BaseException) -> str | None:
    """The upstream's own message behind `exc`: its error object's `message`, else `exc`'s
    text without litellm's words (`wrapper_free`); where that is only the SDK's "Connection
    error." over a reply that broke off, the class and words of the error it stands for.
    None when `exc`'s text carries none of litellm's words (an unknown exception's own)."""
    own = text_field(error_body(exc), "message")
    if own is not None:
        return own
    said = str(getattr(exc, "message", None) or exc).strip()
    text = wrapper_free(said)
    if text == LITELLM_CONNECTION_ERROR and broke_off(exc):
        sdk_error = next((link for link in chain(exc) if str(link).strip() == LITELLM_CONNECTION_ERROR
                          and link.__cause__ is not None), None)
        if sdk_error is not None:
            return f"{type(sdk_error.__cause__).__name__}: {sdk_error.__cause__}"
    return text if text != said else None


def retry_after_of(exc: BaseException) -> tuple[str | None, str | None]:
    """The `Retry-After` and `retry-after-ms` headers of the upstream reply behind a litellm
    exception (each None when it sent none)."""
    for headers in (getattr(getattr(exc, "response", None), "headers", None),
                    getattr(exc, "litellm_response_headers", None)):
        try:
            found = (headers.get("retry-after"), headers.get("retry-after-ms")) if headers is not None else ()
        except Exception:   # NOTE: a provider's odd header object is no reason to fail
            found = ()
        if any(value is not None for value in found):
            return tuple(None if value is None else str(value) for value in found)
    return None, None
