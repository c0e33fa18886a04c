"""Upstream models behind an OpenAI-compatible `api_base`, forwarded without litellm.

`litellm.acompletion` costs several milliseconds of CPU per call (logging objects, cost
maps); for an upstream that already speaks the OpenAI protocol, the gateway can forward
the request itself over a pooled aiohttp session. Same preparation and event shapes as
`UpstreamBackend` (it reuses them); only the transport differs.
Invariants: the forwarded body is the client's, minus the fields the gateway owns, with
the upstream's model name, a budgeted tenant's share as its completion limit
(gateway/upstream.py) and, for streams, `include_usage` on (the fields litellm gets in
`extra_body` are top-level fields again here); `Authorization` carries the model's own key,
none when it has none; upstream HTTP errors are mapped like litellm's
(`map_upstream_status`, the upstream's `Retry-After` passed on, a non-JSON error body never
copied, the model's key redacted, a 5xx logged once: `log_upstream_failure`; a context
overflow the upstream names no field of names the request's prompt field); closing
`run()` closes the connection, so the upstream sees the client leave. `timeout_s` bounds
the connect and each wait for the upstream's next bytes, not the whole reply, so a long
healthy stream is never cut. A stream request
answered with something other than SSE, or an SSE stream that ends before a finish reason,
is a 502 (an error event once streaming began), never an empty or truncated success (a
stream cut mid-way passes on every whole line received before the cut, then its error:
`received_lines`); one
answered with a 200 error object is named by its message, as a whole reply's is. An error
event is answered by the status its `code` and `type` give, by the rule the litellm path
reads it with (`litellm_causes.error_object_status`): a rate limit is the upstream's 429, in
the gateway's words as an error status's is, never the upstream's (they name the operator's
organisation); any other a 502.
A finish reason outside OpenAI's set ("eos", "end_turn", ...) reaches the client as the
litellm path gives it (gateway/finish_reasons.py).
One SSE event may be up to MAX_EVENT_BYTES (a longer one is a 502 quoting none of it). A
failure to reach the upstream is named by its class alone ("Upstream unreachable:
ClientConnectorError"): aiohttp's text names the upstream's host, port and URL.
"""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from gateway.backend import ChatEvent, Prepared
from gateway.config import UpstreamModelConfig
from gateway.errors import ApiError
from gateway.finish_reasons import in_openai_words
from gateway.litellm_causes import error_object_status
from gateway.litellm_errors import map_litellm_error, map_upstream_status, upstream_garbage
from gateway.litellm_odd_replies import body_start
from gateway.model_configs import NO_API_KEY
from gateway.upstream import UpstreamBackend, choice_kwargs
from gateway.upstream_stream_reuse import disarm_reply_at_end
from gateway.upstream_replies import MAX_ERROR_BODY_BYTES, events_from_response, events_from_stream, not_sse

TRANSPORT_FIELDS = ("timeout", "api_base", "api_key", "num_retries", "max_retries")
# one SSE line (a delta sent at once: a long content or tool-arguments delta) at most: as much
# as a request body may hold by default (`server.max_body_bytes`); aiohttp's own limit is
# twice `read_bufsize` (512 KiB by default), which also bounds what it buffers per stream
MAX_EVENT_BYTES = 8 * 1024 * 1024


def _checked(chunk, prompt_param: str):
    """A stream's JSON payload, or its error event raised as the upstream's error."""
    if isinstance(chunk, dict) and "error" in chunk:
        error = chunk["error"] if isinstance(chunk["error"], dict) else {}
        raise _upstream_error(error_object_status(error), error, str(error.get("message", chunk["error"])),
                              prompt_param=prompt_param)
    return chunk


async def sse_json(response: aiohttp.ClientResponse, prompt_param: str = "messages") -> AsyncIterator[dict]:
    """The JSON payloads of an SSE stream's events, up to `[DONE]`. An event's first `data:`
    line that is a whole JSON value (as every OpenAI-style upstream sends it) is passed on
    at once; otherwise the event's `data:` lines are joined with newlines, as the SSE spec
    says, and read at the blank line that ends it (or at the stream's end). Comments and
    other fields are skipped. A reply that is not `text/event-stream` is a 502 before
    anything is read from it, and so is an event over MAX_EVENT_BYTES. `prompt_param`: the
    request's prompt field, for an error event (`_upstream_error`)."""
    if response.content_type != "text/event-stream":
        raise not_sse(response.content_type, await body_start(response.content.iter_any(), MAX_ERROR_BODY_BYTES))
    lines = received_lines(response.content)
    data_lines: list[bytes] = []   # an event spread over several `data:` lines, so far
    num_event_bytes = 0
    while True:
        try:
            raw_line = await anext(lines)
        except StopAsyncIteration:
            raw_line = None
        except (LineTooLong, ValueError):   # NOTE: an older aiohttp says ValueError("Chunk too big")
            raise upstream_garbage(f"an event of the stream is over {MAX_EVENT_BYTES} bytes") from None
        line = raw_line.strip() if raw_line is not None else b""
        if line.startswith(b"data:"):
            value = line[5:].strip()
            if not data_lines and not value:   # an empty data line adds only a newline: no payload
                continue
            if not data_lines:
                if value == b"[DONE]":
                    return
                try:
                    chunk = json.loads(value)
                except ValueError:
                    pass
                else:
                    yield _checked(chunk, prompt_param)
                    continue
            data_lines.append(value)
            num_event_bytes += len(value) + 1
            if num_event_bytes > MAX_EVENT_BYTES:
                raise upstream_garbage(f"an event of the stream is over {MAX_EVENT_BYTES} bytes")
        elif data_lines and (not line or raw_line is None):   # the end of an event of several lines
            joined = b"\n".join(data_lines)
            data_lines.clear()
            num_event_bytes = 0
            if joined.strip() == b"[DONE]":
                return
            yield _checked(json.loads(joined), prompt_param)
        if raw_line is None:
            return


async def received_lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """`content`'s lines (a line over MAX_EVENT_BYTES: `LineTooLong`, aiohttp's limit), and,
    when a read fails (the upstream cut the connection: `ClientPayloadError`; `timeout_s`
    passed), first every whole line received before the failure, then the failure itself.
    aiohttp's StreamReader (read in 3.14) raises a stored error before handing out what it
    has buffered, so a reader slower than the upstream (one that awaits its client between
    lines) lost the stream's last chunks (QA226 F2); those lines are taken from its buffer
    (`_received_before_failure`). A line the cut left without its end is not passed on."""
    lines = aiter(content)   # aiohttp's readline, up to its end
    while True:
        try:
            line = await anext(lines)
        except StopAsyncIteration:
            return
        except (LineTooLong, ValueError):
            raise
        except Exception as failure:   # NOTE: the cut, a timeout: whatever came before it goes first
            *whole_lines, _cut_line = _received_before_failure(content).split(b"\n")
            for whole_line in whole_lines:
                if len(whole_line) >= MAX_EVENT_BYTES:   # as readline's limit (its line ends in "\n")
                    raise LineTooLong(whole_line[:100] + b"...", MAX_EVENT_BYTES) from None
                yield whole_line + b"\n"
            raise failure
        yield line


def _received_before_failure(content: aiohttp.StreamReader) -> bytes:
    """What `content` received and still holds after storing an error, which its reads raise
    first. aiohttp's own buffer, read defensively (`_read_nowait`, private to aiohttp, past
    the stored error): b"" for a reader of another shape (a future aiohttp)."""
    read_nowait = getattr(content, "_read_nowait", None)
    if not callable(read_nowait):
        return b""
    chunks: list[bytes] = []
    try:
        while chunk := read_nowait(-1):
            chunks.append(chunk)
    except Exception:   # NOTE: aiohttp's internals changed: what was read so far
        pass
    return b"".join(chunks)


class PassthroughBackend(UpstreamBackend):
    __slots__ = ("_session",)

    def __init__(self, config: UpstreamModelConfig, *,
                 default_completion_reserve_tokens: int = 256,
                 tenant_budget_room: Callable[[str], int | None] | None = None) -> None:
        super().__init__(config, default_completion_reserve_tokens=default_completion_reserve_tokens,
                         tenant_budget_room=tenant_budget_room)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._warn_of_missing_key()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            read_bufsize=MAX_EVENT_BYTES // 2,
            timeout=aiohttp.ClientTimeout(total=None, connect=self.config.timeout_s,
                                          sock_read=self.config.timeout_s))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()

    def health(self) -> dict:
        return {"model": self.model_id, "kind": "upstream", "passthrough": True,
                "ready": self._session is not None}

    async def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        call = prepared.payload
        body = {k: v for k, v in choice_kwargs(prepared).items() if k not in TRANSPORT_FIELDS}
        for key, _ in self.config.litellm_params:
            if key != "extra_body":
                body.pop(key, None)
        extra_body = body.pop("extra_body", None)
        body.update(extra_body if isinstance(extra_body, dict) else {})   # the client's other fields
        body["model"] = self.config.upstream_model_name()
        base = (call.kwargs.get("api_base") or "").rstrip("/")
        url = f"{base}/chat/completions" if call.is_chat else f"{base}/completions"
        prompt_param = "messages" if call.is_chat else "prompt"
        headers = {"Content-Type": "application/json"}
        api_key = call.kwargs.get("api_key")
        if api_key and api_key != NO_API_KEY:   # with no key, no Authorization (not the placeholder)
            headers["Authorization"] = f"Bearer {api_key}"
        started_s = time.perf_counter()
        try:
            try:
                response = await self._session.post(url, data=json.dumps(body), headers=headers)
            except Exception as exc:   # its text names the upstream's address: not the tenant's business
                raise map_litellm_error(exc, quote=False) from None
            async with response:
                if response.status >= 400:
                    raise await _status_error(response, prompt_param)
                if not body.get("stream"):
                    try:
                        reply = await response.json(content_type=None)
                    except ValueError:   # (a proxy's HTML page: named, never quoted, as through litellm)
                        raise upstream_garbage("its body is not JSON") from None
                    except Exception as exc:
                        raise map_litellm_error(exc) from None
                    for event in events_from_response(reply, call.is_chat, prepared.num_prompt_tokens):
                        yield in_openai_words(event)
                    return
                disarm_reply_at_end(response)
                async for event in events_from_stream(sse_json(response, prompt_param), call.is_chat,
                                                      prepared.num_prompt_tokens, started_s):
                    yield in_openai_words(event)
        except ApiError as error:   # an upstream may quote the key it was sent; logged once
            raise self.failed(prepared, error) from None


async def _status_error(response: aiohttp.ClientResponse, prompt_param: str = "messages") -> ApiError:
    """The upstream's error status as an `ApiError`: its JSON error message (one line) and
    `Retry-After`; a body that is not an OpenAI error is named by its status only."""
    try:
        text = await response.text(errors="replace")
        error = json.loads(text).get("error") or {}
    except Exception:   # NOTE: not JSON, not an object, or the body could not be read
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    return _upstream_error(response.status, error, str(error.get("message") or f"HTTP {response.status}"),
                           response.headers.get("Retry-After"), response.headers.get("retry-after-ms"),
                           prompt_param=prompt_param)


def _upstream_error(status: int, error: dict, message: str, retry_after: str | None = None,
                    retry_after_ms: str | None = None, *, prompt_param: str = "messages") -> ApiError:
    """`map_upstream_status` for an upstream's OpenAI error object: its `code`, `param` and
    `type` where they are strings (a stream's error event, an error status's body);
    `prompt_param`, the request's prompt field, for a context overflow that names none."""
    def text(name: str) -> str | None:
        value = error.get(name)
        return value if isinstance(value, str) else None
    return map_upstream_status(status, message, text("code"), retry_after=retry_after,
                               retry_after_ms=retry_after_ms, param=text("param"),
                               error_type=text("type"), prompt_param=prompt_param)
