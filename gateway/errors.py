"""OpenAI-shaped errors.

Every failure the gateway reports, from bad JSON to a worker crash, leaves as one
`ApiError`, rendered as `{"error": {"message", "type", "param", "code"}}` with the
status an OpenAI client expects. Handlers raise it; `app.py` installs the one exception
handler that renders it, plus a last-resort handler so nothing leaves as a bare 500 page.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class ApiError(Exception):
    """An error with its HTTP status and OpenAI fields.

    `headers` carries e.g. `Retry-After`; `param` names the offending request field;
    `num_prompt_tokens` the prompt's token count when the refusal counted it (a prompt over
    the context: its refused step records that size, gateway/refused_steps.py).
    """

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    num_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        Exception.__init__(self, self.message)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


def invalid_request(message: str, *, param: str | None = None,
                    code: str | None = "invalid_request") -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


MAX_NAMED_MODELS = 16   # a not-found message names at most this many of the served models
MAX_SHOWN_PATH_CHARS = 200   # of a path no route serves, what its 404 message repeats


def model_not_found(model: str, served: Sequence[str] = ()) -> ApiError:
    """404 for a model the gateway does not serve; the message names those it does (a
    framework's default model name, e.g. `gpt-4o-mini`, is the usual cause)."""
    names = ", ".join(served[:MAX_NAMED_MODELS]) + (", ..." if len(served) > MAX_NAMED_MODELS else "")
    hint = f" This gateway serves: {names} (GET /v1/models lists them)." if served else ""
    return ApiError(404, f"The model '{model}' does not exist or you do not have access to it.{hint}",
                    "invalid_request_error", "model_not_found", "model")


def invalid_url(method: str, path: str, api_paths: Iterable[str]) -> ApiError:
    """404 for a path no route serves, named as OpenAI names it ("Invalid URL (POST
    /chat/completions)"), with a hint when the path is an API path without its `/v1`
    (a base URL set without it, the usual first mistake)."""
    shown = path if len(path) <= MAX_SHOWN_PATH_CHARS else path[:MAX_SHOWN_PATH_CHARS - 1] + "…"
    first = path.strip("/").split("/", 1)[0]
    hint = (f" The API is under /v1: {method} /v1{shown}." if not path.startswith("/v1/") and first
            and any(p.startswith(f"/v1/{first}") for p in api_paths) else "")
    return ApiError(404, f"Invalid URL ({method} {shown}).{hint}", "invalid_request_error", "not_found")


def response_not_found(response_id: str, *, param: str = "response_id",
                       code: str = "response_not_found", what: str = "Response") -> ApiError:
    """404 for a stored response this tenant does not have (unknown, or another's)."""
    return ApiError(404, f"{what} with id '{response_id}' not found.", "invalid_request_error", code, param)


def context_length_exceeded(num_prompt_tokens: int, num_max_tokens: int | None,
                            max_context_tokens: int, *, param: str = "messages",
                            budget_param: str = "max_tokens") -> ApiError:
    """400 for a prompt plus completion budget over the model's context. The error names
    `param`, what holds the prompt ("messages" on chat completions, "prompt" on
    completions), unless the completion budget alone leaves no room for any prompt: then
    it names `budget_param`, the field that asked for it (`max_tokens`, or chat's
    `max_completion_tokens` when the client sent that), as no shorter prompt could fit."""
    if num_max_tokens is None:   # no completion asked for: the prompt leaves it no room
        no_room = ", which leaves no room for a completion" if num_prompt_tokens == max_context_tokens else ""
        return ApiError(
            400, f"This model's maximum context length is {max_context_tokens} tokens. However, your {param} "
            f"resulted in {num_prompt_tokens} tokens{no_room}. Please reduce the length of the {param}.",
            "invalid_request_error", "context_length_exceeded", param, num_prompt_tokens=num_prompt_tokens)
    return ApiError(
        400,
        f"This model's maximum context length is {max_context_tokens} tokens. However, you "
        f"requested {num_prompt_tokens + num_max_tokens} tokens ({num_prompt_tokens} in the {param}, "
        f"{num_max_tokens} in the completion). Please reduce the length of the {param} "
        "or completion.",
        "invalid_request_error", "context_length_exceeded",
        budget_param if num_max_tokens >= max_context_tokens else param, num_prompt_tokens=num_prompt_tokens)


def unauthorized(message: str = "Invalid API key provided.") -> ApiError:
    return ApiError(401, message, "invalid_request_error", "invalid_api_key", None,
                    {"WWW-Authenticate": "Bearer"})


def body_too_large(max_body_bytes: int) -> ApiError:
    return ApiError(413, f"Request body exceeds the limit of {max_body_bytes} bytes.",
                    "invalid_request_error", "request_too_large")


def rate_limited(message: str, retry_after_s: float) -> ApiError:
    """429 the client should retry; `Retry-After` is `retry_after_s` rounded up to whole
    seconds, at least 1, and not cut short: a client that honours it is not refused again
    for the same cause (a tokens/minute bucket in debt can need minutes: QA97)."""
    return ApiError(429, message, "rate_limit_error", "rate_limit_exceeded", None,
                    {"Retry-After": str(max(1, math.ceil(retry_after_s)))})


def says_never_retry(error: ApiError) -> bool:
    """Whether `error` tells the client no wait cures it (`x-should-retry: false`, as the
    official client reads it): a spent budget, a request past the tokens per minute, a
    fault only the operator can mend."""
    return error.headers.get("x-should-retry") == "false"


def quota_exhausted(message: str) -> ApiError:
    """429 the client must not retry: the tenant's token budget is spent.

    NOTE: the official client honours `x-should-retry: false`, so it fails at once
    instead of retrying a request that cannot succeed.
    """
    return ApiError(429, message, "insufficient_quota", "insufficient_quota", None,
                    {"x-should-retry": "false"})


def server_error(message: str = "The server had an error while processing your request.",
                 *, code: str = "internal_error") -> ApiError:
    return ApiError(500, message, "server_error", code)


def unavailable(message: str, *, code: str = "service_unavailable") -> ApiError:
    return ApiError(503, message, "server_error", code, None, {"Retry-After": "1"})


SHUTTING_DOWN_CODE = "server_shutting_down"   # a request or stream the gateway's shutdown cut: retry it


# the request's scope key a handler the shutdown cuts leaves its answer's headers under (its
# `x-request-id`, `x-session-id`, rate limits), for the 503 gateway/fast_paths.py answers it with
CUT_REPLY_HEADERS = "stepahead.cut_reply_headers"


def request_cut_at_shutdown() -> ApiError:
    """What a request the shutdown timeout cuts before its answer began gets (uvicorn's
    own answer would be a plain-text 500)."""
    return unavailable("The gateway is shutting down and cut this request before it was answered; retry the "
                       "request.", code=SHUTTING_DOWN_CODE)


def stream_cut_at_shutdown(
        message: str = "The gateway is shutting down and cut this stream before it finished; retry the request.",
) -> ApiError:
    """What a stream still running when the shutdown timeout passes ends with."""
    return unavailable(message, code=SHUTTING_DOWN_CODE)
