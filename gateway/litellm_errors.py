"""litellm / provider exceptions and upstream HTTP errors → OpenAI-shaped `ApiError`.

Invariant: the client's own mistakes keep their status (400, 404, 413, 422, 429); a
failure between the gateway and the provider (bad upstream credentials, connection,
provider 5xx) is the gateway's problem and leaves as 502/503/504 with a `server_error`
type, so a client never mistakes a misconfigured upstream key for its own bad key.
"""
from __future__ import annotations

from gateway.errors import ApiError

CLIENT_STATUSES = {400: "invalid_request_error", 404: "invalid_request_error",
                   413: "invalid_request_error", 422: "invalid_request_error",
                   429: "rate_limit_error"}


def map_litellm_error(exc: Exception) -> ApiError:
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or exc) or name
    if name == "ContextWindowExceededError":
        return ApiError(400, message, "invalid_request_error", "context_length_exceeded",
                        "messages")
    if name in ("Timeout", "APITimeoutError"):
        return ApiError(504, f"Upstream timed out: {message}", "server_error", "upstream_timeout")
    if name == "APIConnectionError" or "Connect" in name:
        return ApiError(502, f"Upstream unreachable: {message}", "server_error",
                        "upstream_unavailable")
    return map_upstream_status(status, message)


def map_upstream_status(status: int | None, message: str, code: str | None = None) -> ApiError:
    """An upstream HTTP error status (with its message and OpenAI code, if any)."""
    if code == "context_length_exceeded":
        return ApiError(400, message, "invalid_request_error", code, "messages")
    if status in (408, 504):
        return ApiError(504, f"Upstream timed out: {message}", "server_error", "upstream_timeout")
    if status in (401, 403):
        return ApiError(502, "The upstream provider rejected the gateway's credentials.",
                        "server_error", "upstream_auth_error")
    if status in CLIENT_STATUSES:
        code = "rate_limit_exceeded" if status == 429 else (
            "model_not_found" if status == 404 else "upstream_rejected")
        error = ApiError(status, message, CLIENT_STATUSES[status], code)
        if status == 429:
            error.headers["Retry-After"] = "1"
        return error
    if status == 503:
        return ApiError(503, f"Upstream unavailable: {message}", "server_error",
                        "upstream_unavailable", None, {"Retry-After": "1"})
    return ApiError(502, f"Upstream error: {message}", "server_error", "upstream_error")
