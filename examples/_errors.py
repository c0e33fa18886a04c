"""What the examples share: one line on stderr, not a traceback, for the errors a user meets
first (a wrong key, an unknown model, no gateway at --base-url), and their retry setting.

Invariant: `explain` returns one line (no newline) that says what failed and what to check;
`report` prints it to stderr prefixed with the example's name and returns exit status 1.
The examples are run as scripts by path (`python examples/x.py`), so this folder is first on
sys.path and `from _errors import ...` finds this file.
"""
from __future__ import annotations

import sys
from pathlib import Path

import openai

# Every example's client sets max_retries=MAX_RETRIES. The SDK's default (2 retries with
# backoff) only delays the answer for the errors an example meets: a gateway that is not
# running refuses at once, and a wrong key or model is refused again on each retry. So 0:
# a down gateway is reported in about a second, the same way in every example.
MAX_RETRIES = 0


def _gateway_message(exc: openai.APIStatusError) -> str:
    """The gateway's own `error.message` (OpenAI-shaped body), else the SDK's text."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = " ".join(message.split()) if isinstance(message, str) and message.strip() else exc.message
    return text.rstrip(".") + "."   # a sentence: what to check follows it


def explain(exc: openai.APIError, base_url: str) -> str:
    """One line: what failed and what to check (the key, --model, --base-url / `stepahead serve`)."""
    if isinstance(exc, openai.APIConnectionError):   # refused, reset or timed out: no answer at all
        cause = exc.__cause__ or exc.__context__
        why = exc.message.rstrip(".") + (f" ({str(cause).rstrip('.') or type(cause).__name__})" if cause else "")
        return (f"cannot reach the gateway at {base_url}: {why}. Is `stepahead serve` running, "
                "and is --base-url its address (ending in /v1)?")
    if isinstance(exc, openai.AuthenticationError):
        return (f"the gateway at {base_url} refused the API key: {_gateway_message(exc)} Check --api-key "
                "(the demo key `stepahead serve` printed, or a key of a tenant in its config).")
    if isinstance(exc, openai.NotFoundError):
        base = base_url.rstrip("/")
        if not base.endswith("/v1"):   # the usual slip: the API lives under /v1
            return (f"not found at {base_url}: {_gateway_message(exc)} --base-url should end in /v1 "
                    f"({base}/v1).")
        return (f"not found at {base_url}: {_gateway_message(exc)} Check --model (GET {base}/models lists "
                "the served ones) and --base-url.")
    if isinstance(exc, openai.APIStatusError):
        return f"the gateway at {base_url} answered {exc.status_code}: {_gateway_message(exc)}"
    return f"request to the gateway at {base_url} failed: {exc}"


def report(exc: openai.APIError, base_url: str, then: str = "") -> int:
    """Print `explain`'s line (and `then`, on the same line) on stderr, named after the running
    example; return exit status 1."""
    print(f"{Path(sys.argv[0]).stem}: {explain(exc, base_url)}" + (f" {then}" if then else ""), file=sys.stderr)
    return 1
