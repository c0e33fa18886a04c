"""One replayed request against a live gateway: streaming, timed, never raising.

Every call returns a `RequestResult`; transport errors, HTTP errors and SSE error
events become `error` text, so one failure never stops a replay by itself. A failure on
the connection is marked (`connection_failed`): the runner then asks liveness.py whether
the gateway is gone.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp


@dataclass(slots=True)
class RequestResult:
    tenant: str
    session: str | None
    step_index: int
    sent_at_s: float  # seconds since the replay started
    ttft_s: float | None = None
    e2e_s: float | None = None
    inter_token_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    service_tier: str | None = None   # the trace line's ("flex" for a batch line), None: the default
    answered: bool = False            # an HTTP answer came (an error status too)
    connection_failed: bool = False   # refused, reset, closed or timed out on the connection
    # s from when the replay's schedule had it due to its send (its wait for a `--concurrency`
    # slot, the harness's own lateness); TTFT and e2e count from the send; None: not scheduled
    send_lag_s: float | None = None


def _usage_into(result: RequestResult, usage: dict | None) -> None:
    if not usage:
        return
    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    result.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    result.cached_tokens = int(details.get("cached_tokens") or 0)


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict, headers: dict,
                         result: RequestResult, started: float) -> RequestResult:
    """POST `body` with stream=True to `url`; fill in timings, usage and errors.

    NOTE: aiohttp rather than httpx: on this 2-core machine it spends about half the
    client CPU per streamed request (1.4 vs 3.2 ms measured), CPU the gateway and the
    workers under test would otherwise lose to the harness."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    last_chunk_s: float | None = None
    try:
        async with session.post(url, data=json.dumps(body), headers={**headers, **_JSON}) as response:
            result.answered = True
            if response.status != 200:
                text = (await response.read()).decode("utf-8", "replace")
                result.error = f"HTTP {response.status}: {_error_message(text)}"
                return result
            async for line in _lines(response):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    result.error = _error_message(json.dumps(chunk))
                    break
                now = time.perf_counter()
                choice = chunk["choices"][0] if chunk.get("choices") else None
                if choice is not None and _has_content(choice):
                    if result.ttft_s is None:
                        result.ttft_s = now - started
                    elif last_chunk_s is not None:
                        result.inter_token_s.append(now - last_chunk_s)
                    last_chunk_s = now
                elif choice is not None and choice.get("finish_reason") is not None and result.ttft_s is None:
                    result.ttft_s = now - started   # an empty reply: its finish is its first event
                _usage_into(result, chunk.get("usage"))
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.connection_failed = isinstance(exc, aiohttp.ClientConnectionError)
    result.e2e_s = time.perf_counter() - started
    if result.ttft_s is None and result.error is None:
        result.ttft_s = result.e2e_s  # an empty answer: its first (and last) event
    return result


_JSON = {"Content-Type": "application/json"}


async def _lines(response: aiohttp.ClientResponse):
    """The body's lines as text, as they arrive (no limit on a line's length)."""
    pending = b""
    async for data in response.content.iter_any():
        pending += data
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace").rstrip("\r")


def _has_content(choice: dict) -> bool:
    """Whether a chunk's choice carries generated text or tool-call pieces (a chunk with
    only the finish reason carries none: it is no token, so no inter-token gap)."""
    if "text" in choice:
        return bool(choice["text"])
    delta = choice.get("delta") or {}
    return bool(delta.get("content") or delta.get("tool_calls"))


def _error_message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:300]
