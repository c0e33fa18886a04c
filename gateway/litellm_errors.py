"""litellm / provider exceptions and upstream HTTP errors → OpenAI-shaped `ApiError`.

Invariants: the client's own mistakes keep their status (400, 409, 413, 422); a
failure between the gateway and the provider (bad upstream credentials, connection,
timeout, provider 5xx, a reply that is not the OpenAI protocol) is the gateway's problem
and leaves as 502/503/504 with a `server_error` type, so a client never mistakes a
misconfigured upstream key for its own bad key. A message is one short line (the
exception's class and first line): never a traceback, never a file path of this host.
An upstream's wait is passed on as gateway/retry_after.py says. A 200 whose body (or a stream's
event) is not JSON is named so, in one wording on both paths (NOT_JSON_BODY, NOT_JSON_EVENT),
never quoted (a proxy's HTML page names its hosts) nor in the JSON parser's words. An
upstream that does not know the model the gateway asks for (a 404, or code
`model_not_found`) is the gateway's misconfiguration too: a 502, never a 404 telling the
client that a model `/v1/models` lists does not exist; it and rejected upstream credentials (502
`upstream_auth_error`) carry `x-should-retry: false` (the operator's to fix). The status is
the one the upstream answered, never the one litellm chose by the words of its message
(`litellm_causes.upstream_status`), and a message is the upstream's own wherever it can be
read, without litellm's wrapper words. A 400/409/413/422 keeps the upstream's own message, `param`
and `code` (litellm's `BadRequestError: OpenAIException - Error code: 400 - ` prefix taken
off); a `context_length_exceeded` without a `param` names the request's prompt field
(`prompt_param`: "messages", "prompt", "input"), never another endpoint's. litellm's own
refusal of a parameter before any call (`UnsupportedParamsError`) is a 400
`unsupported_parameter` naming it, in the gateway's words (never litellm's advice about its
own settings, which the client cannot change). No message
ever carries an `Authorization` value (`Bearer …` is redacted in every line), nor an
address of the upstream (a URL, `host:port`, an IPv4 address: the operator's endpoints, not
the tenant's business), and a backend redacts its own key from its errors (`redacted`), and
any quote of the key's first MIN_SECRET_CHARS characters or more (a masked key). An
upstream whose own account ran out (code or type `insufficient_quota`, or a 402) is the
gateway's fault too: a 503 `upstream_quota_exceeded` the client is told not to retry, never a 429
that sends it to retry each second and check its own billing. An upstream's 429 (its rate
limit on the gateway's account, which all tenants share) stays a 429 `rate_limit_exceeded`
with the upstream's wait, in the gateway's words (`upstream_rate_limited`), never the
upstream's: OpenAI's name the operator's organisation and what all tenants together used.
The upstream's own words ride along for the operator's log only (`UpstreamRateLimited`).
A rate limit sent with no error status (a stream's error event, a 200 whose body is the
error object) is told by its code and type alone (`litellm_causes.error_object_status`).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.errors import ApiError
from gateway.litellm_causes import (chain, error_body, error_object_status, is_timeout, is_unreachable,
                                    is_unreadable_reply, not_json, retry_after_of, text_field, upstream_status)
from gateway.litellm_odd_replies import litellm_200_error, own_words, said_in_200
from gateway.retry_after import retry_after_headers

# (409: a conflict with the request's own state, OpenAI's `ConflictError`: QA180)
CLIENT_STATUSES = {400: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
                   422: "invalid_request_error", 429: "rate_limit_error"}
MAX_MESSAGE_CHARS = 240
# the headers of a fault only the gateway's operator can cure (its upstream's key, model or
# account): the OpenAI SDK retries a 5xx twice unless told not to
OPERATORS_TO_FIX = {"x-should-retry": "false"}
UPSTREAM_QUOTA = "insufficient_quota"   # OpenAI's code and type for an account out of credit
# OpenAI's 429 for one request over a per-minute token limit ("Request too large for gpt-4o in
# organization org-… on tokens per min (TPM): Limit 30000, Requested 36000."): waiting cures nothing
_TOO_LARGE = re.compile(r"(?i)^\s*request too large\b")
# a file path of two or more parts, not inside a word (a model name like "org/family/model" is no path)
_PATH = re.compile(r"""(?<![\w.\-])(?:[A-Za-z]:)?(?:[\\/][^\s\\/'"<>:,;()]+){2,}[\\/]?""")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|\n\s*File \"")
_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)+")
# the parameters litellm's UnsupportedParamsError names: "p does not support parameters:
# ['a', 'b'], for model=…", "… parameters: a, b, for model=…", "Setting `a` is not supported
# by …", "Setting {'a': 1} is not supported by …", "Setting a is not supported …"
_UNSUPPORTED_LIST = re.compile(r"does not support parameters?:\s*(\[[^\]]*\]|[\w, ]+?)(?:,\s*for model|\.|$)")
_UNSUPPORTED_SETTING = re.compile(r"Setting\s+(?:`(\w+)`|\{'(\w+)'|(\w+)\b)")
_PARAM_NAME = re.compile(r"\w+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s'\"<>,;]+")
# a Python object's repr in a message ("ssl:<ssl.SSLContext object at 0x7f…>"): its class name is enough
_OBJECT_REPR = re.compile(r"<(?:[\w]+\.)*([\w]+) object at 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r"\s+at 0x[0-9a-fA-F]+\b")   # any other repr's address: <function f at 0x…>
# the upstream's addresses: a URL (any scheme; trailing punctuation stays), a host:port (an
# IPv4 address, [IPv6], or a name whose last label has a letter: "vllm:8000", "api.corp:443";
# never a time "12:30" or "12:30:45", a ratio "16:9", an ollama tag "llama3:8b"), a lone IPv4
# address. Each starts only where a run of its characters starts, so a scan is linear.
_URL = re.compile(r"""(?i)(?<![\w+.\-])[a-z][a-z0-9+.\-]*://[^\s'"<>]+""")
_HOST_PORT = re.compile(r"""(?<![\w.\-:])(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]"""
                        r"""|(?:[A-Za-z0-9\-]+\.)*[0-9\-]*[A-Za-z][A-Za-z0-9\-]*):\d{1,5}(?![\w:]|\.\d)""")
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?!\w|\.\d)")
MAX_SCAN_CHARS = 4096   # of a line, the part looked at at all (the rest is cut, as it would be)
HIDDEN_ADDRESS = "<address>"
REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8   # shorter "keys" (test placeholders) are not looked for
# litellm's words for a 200 whose body the OpenAI SDK could not read as JSON (it got the text)
_NOT_JSON = re.compile(r"Empty or invalid response from LLM endpoint|'str' object has no attribute 'model_dump'")
# what a reply that is not JSON is called on both paths, never in the parser's words ("Expecting value: …")
NOT_JSON_BODY = "its body is not JSON"
NOT_JSON_EVENT = "an event of the stream is not JSON"


def _url(match: re.Match) -> str:
    """A URL's replacement; the punctuation after it (".", ")") is the sentence's."""
    text = match.group(0)
    return "<url>" + text[len(text.rstrip(".,;:)]")):]


def one_line(text: str) -> str:
    """`text` cut to its first line, before any traceback, with file paths, `Bearer`
    values, object reprs' addresses and the upstream's addresses (URLs, `host:port`, IPv4)
    taken out, whitespace collapsed and at most MAX_MESSAGE_CHARS long."""
    text = _TRACEBACK.split(str(text), 1)[0]
    line = next((part for part in text.splitlines() if part.strip()), "").strip()
    cut = len(line) > MAX_SCAN_CHARS
    line = _BEARER.sub(rf"\1 {REDACTED}", _LITELLM_PREFIX.sub("", line[:MAX_SCAN_CHARS]))
    line = _ADDRESS.sub("", _OBJECT_REPR.sub(r"<\1>", line))
    line = _IPV4.sub(HIDDEN_ADDRESS, _HOST_PORT.sub(HIDDEN_ADDRESS, _URL.sub(_url, line)))
    line = " ".join(_PATH.sub("<path>", line).split())
    if not cut and len(line) <= MAX_MESSAGE_CHARS:
        return line
    return line[:MAX_MESSAGE_CHARS - 1] + "…"   # ("…" also tells `redact` a key may be cut)


def short_message(exc: BaseException) -> str:
    """The exception's class name and the first line of its message (`one_line`)."""
    name = type(exc).__name__
    text = one_line(str(getattr(exc, "message", None) or exc))
    return text if text.startswith(name) else (f"{name}: {text}" if text else name)


def _redact_leading_fragments(text: str, secret: str) -> str:
    """`text` with each run agreeing with `secret`'s first MIN_SECRET_CHARS characters or
    more (the key whole, a quote cut short, a masked "sk-proj-abcd****") replaced."""
    parts, start = [], 0
    while (at := text.find(secret[:MIN_SECRET_CHARS], start)) != -1:
        parts += [text[start:at], REDACTED]
        start = at + MIN_SECRET_CHARS
        while start < len(text) and start - at < len(secret) and text[start] == secret[start - at]:
            start += 1
    return "".join(parts) + text[start:]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret (of MIN_SECRET_CHARS or more) replaced by REDACTED, with any
    quote of its first MIN_SECRET_CHARS or more, and the beginning of one that `one_line`
    cut off at the end ("sk-abc…")."""
    for secret in secrets:
        if not secret or len(secret) < MIN_SECRET_CHARS:
            continue
        text = _redact_leading_fragments(text, secret)
        if text.endswith("…"):
            head = text[:-1]
            cut = next((n for n in range(min(len(secret) - 1, len(head)), MIN_SECRET_CHARS // 2 - 1, -1)
                        if head.endswith(secret[:n])), None)
            if cut is not None:
                text = head[:-cut] + REDACTED + "…"
    return text


def redacted(error: ApiError, secrets: Iterable[str]) -> ApiError:
    """`error` with the secrets (a backend's own upstream key) taken out of its message
    and param (and an upstream's 429's own words), before it reaches the client or a log."""
    secrets = tuple(secrets)
    error.message = redact(error.message, secrets)
    if error.param:
        error.param = redact(error.param, secrets)
    if isinstance(error, UpstreamRateLimited):
        error.upstream_message = redact(error.upstream_message, secrets)
    return error


def unsupported_params_error(exc: BaseException) -> ApiError:
    """litellm's `UnsupportedParamsError` (raised before any call, for a parameter its
    provider config does not list) as a 400 `unsupported_parameter` naming the first
    parameter it names (all of them in the message); None as `param` when none can be read."""
    text = str(getattr(exc, "message", None) or exc)
    names: list[str] = []
    if (listed := _UNSUPPORTED_LIST.search(text)) is not None:
        names = _PARAM_NAME.findall(listed.group(1))
    elif (setting := _UNSUPPORTED_SETTING.search(text)) is not None:
        names = [next(group for group in setting.groups() if group)]
    if not names:
        return ApiError(400, "This model's upstream provider does not support a parameter of the "
                        "request.", "invalid_request_error", "unsupported_parameter")
    quoted = ", ".join(f"'{name}'" for name in names)
    noun = "parameter" if len(names) == 1 else "parameters"
    return ApiError(400, f"This model's upstream provider does not support the {noun} {quoted}: "
                    f"ask without {'it' if len(names) == 1 else 'them'}.", "invalid_request_error",
                    "unsupported_parameter", names[0])


def map_litellm_error(exc: BaseException, *, quote: bool = True, prompt_param: str = "messages") -> ApiError:
    """`exc` (litellm's, a provider's, aiohttp's) as the client's `ApiError`, by the status the
    upstream answered (`upstream_status`, not litellm's guess from its words), in the
    upstream's own words (`own_words`: its error's message, else litellm's text without
    litellm's class names and "OpenAIException - "; an unknown exception's class and line);
    a 200 whose body is an error object is answered as on passthrough (`error_in_200_reply`);
    with `quote=False` named by its class alone (a transport error, whose text is all about
    the upstream's address: "Connection timeout to host http://…"). Unreachable only when
    no connection was made (`is_unreachable`): a stream that broke off is an `upstream_error`.
    `prompt_param` is the request's prompt field, named by a context overflow the upstream
    named no field of."""
    name = type(exc).__name__
    error = error_body(exc)
    links = chain(exc)
    refusal = next((link for link in links if type(link).__name__ == "UnsupportedParamsError"), None)
    if refusal is not None:
        return unsupported_params_error(refusal)
    if (in_200 := litellm_200_error(links)) is not None:   # not litellm's made-up 422 (QA147)
        # (litellm keeps only the error's code)
        return error_in_200_reply(error or {"code": in_200.status_code}, said_in_200(in_200), prompt_param)
    words = own_words(exc)
    if name == "ContextWindowExceededError":
        return ApiError(400, one_line(words or str(getattr(exc, "message", None) or exc)), "invalid_request_error",
                        "context_length_exceeded", text_field(error, "param") or prompt_param)
    message = name if not quote else one_line(words) if words is not None else short_message(exc)
    if any(is_timeout(link) for link in links):
        return ApiError(504, f"Upstream timed out: {message}", "server_error", "upstream_timeout")
    if is_unreachable(exc):
        return ApiError(502, f"Upstream unreachable: {message}", "server_error", "upstream_unavailable")
    status = upstream_status(exc)
    if status in (None, 500) and (not_json(exc) or any(_NOT_JSON.search(str(link)) for link in links)):
        return upstream_garbage(NOT_JSON_BODY)   # (litellm quotes the body, or the parser's words: QA226)
    if status in (None, 500) and is_unreadable_reply(links):   # not Python's words (QA98)
        return upstream_garbage("a part of it is not the shape the OpenAI protocol gives it")
    retry_after, retry_after_ms = retry_after_of(exc)
    return map_upstream_status(status, message, text_field(error, "code"), retry_after=retry_after,
                               retry_after_ms=retry_after_ms, param=text_field(error, "param"),
                               error_type=text_field(error, "type"), prompt_param=prompt_param)


def error_in_200_reply(error: dict, said: str | None, prompt_param: str = "messages") -> ApiError:
    """A 200 whose body is an error object (`error`; `said`, its message): a rate limit
    (`error_object_status`) is the upstream's 429, in the gateway's words, as an error event
    is; any other, a malformed reply naming its message (`upstream_garbage`)."""
    if error_object_status(error) == 429:
        return map_upstream_status(429, said or "", text_field(error, "code"), param=text_field(error, "param"),
                                   error_type=text_field(error, "type"), prompt_param=prompt_param)
    return upstream_garbage(f"an error with status 200: {said}" if said else "an error with status 200")


def upstream_garbage(what: str) -> ApiError:
    """A 200 reply that is not the OpenAI protocol: the upstream's fault, a 502."""
    return ApiError(502, f"Upstream error: the upstream's reply is malformed ({one_line(what)}).",
                    "server_error", "upstream_error")


def upstream_quota_exceeded() -> ApiError:
    """503 for an upstream whose own quota ran out (OpenAI's 429 `insufficient_quota`, a 402
    Payment Required as OpenRouter sends when the account is out of credit): the
    operator's to fix, so no `Retry-After` and `x-should-retry: false` (waiting seconds does
    not cure it), and none of the upstream's words ("check your plan and billing")."""
    return ApiError(503, "The upstream provider's quota for this model is exhausted; please "
                    "contact the operator of this gateway.", "server_error", "upstream_quota_exceeded",
                    None, dict(OPERATORS_TO_FIX))


@dataclass(slots=True)
class UpstreamRateLimited(ApiError):
    """An upstream's 429 as the client gets it (`upstream_rate_limited`: the gateway's
    words), with `upstream_message`, the upstream's own (one line: `one_line`), which only
    the operator's log quotes (gateway/upstream_rate_limits.py)."""

    upstream_message: str = ""


def upstream_rate_limited(message: str, retry_after: str | None = None,
                          retry_after_ms: str | None = None) -> UpstreamRateLimited:
    """429 `rate_limit_exceeded` (type `rate_limit_error`, the OpenAI SDK's `RateLimitError`)
    for an upstream's 429, with its wait (`retry_after_headers`), in the gateway's words: the
    upstream's (`message`, read only to tell a request too large for the per-minute limit)
    name the operator's organisation, its limit and the usage of all tenants together. One
    too large for the per-minute limit (OpenAI's "Request too large") is told so, with
    `x-should-retry: false` and no wait: the SDK, a background run and a batch line then do
    not send it again. The upstream's words are kept for the operator's log alone."""
    words = one_line(message)
    if _TOO_LARGE.match(message):   # no wait makes it fit: no Retry-After, and never retry (as limit_refusals)
        return UpstreamRateLimited(
            429, "The request is larger than the upstream provider's per-minute token limit for this model "
            "allows; send fewer tokens (a smaller prompt or max_tokens).", CLIENT_STATUSES[429],
            "rate_limit_exceeded", None, {"x-should-retry": "false"}, upstream_message=words)
    headers = retry_after_headers(retry_after, retry_after_ms)
    return UpstreamRateLimited(
        429, "The upstream provider is rate limiting this gateway's requests for this model; "
        f"retry after {headers['Retry-After']} s.", CLIENT_STATUSES[429], "rate_limit_exceeded", None, headers,
        upstream_message=words)


def map_upstream_status(status: int | None, message: str, code: str | None = None, *,
                        retry_after: str | None = None, param: str | None = None,
                        error_type: str | None = None, retry_after_ms: str | None = None,
                        prompt_param: str = "messages") -> ApiError:
    """An upstream HTTP error status (with its message, OpenAI code, type and param, and
    `Retry-After` and `retry-after-ms`, if any). A context overflow keeps the upstream's
    `param` ("prompt", "max_tokens"), else names `prompt_param`, the request's prompt field."""
    message = one_line(message) or f"HTTP {status}"
    if code == "context_length_exceeded":
        return ApiError(400, message, "invalid_request_error", code, param or prompt_param)
    if UPSTREAM_QUOTA in (code, error_type) or status == 402:   # the operator's account, not the tenant's
        return upstream_quota_exceeded()
    if status in (408, 504):
        return ApiError(504, f"Upstream timed out: {message}", "server_error", "upstream_timeout")
    if status in (401, 403):
        return ApiError(502, "The upstream provider rejected the gateway's credentials.",
                        "server_error", "upstream_auth_error", None, dict(OPERATORS_TO_FIX))
    if status == 404 or code == "model_not_found":
        return ApiError(502, "Upstream error: the upstream does not know the model this gateway is "
                        f"configured to ask it for (its litellm_model): {message}", "server_error",
                        "upstream_error", None, dict(OPERATORS_TO_FIX))
    if status in CLIENT_STATUSES:
        if status == 429:
            return upstream_rate_limited(message, retry_after, retry_after_ms)
        return ApiError(status, message, CLIENT_STATUSES[status], code or "upstream_rejected",
                        param)
    if status == 503:
        return ApiError(503, f"Upstream unavailable: {message}", "server_error",
                        "upstream_unavailable", None, retry_after_headers(retry_after, retry_after_ms))
    return ApiError(502, f"Upstream error: {message}", "server_error", "upstream_error")
