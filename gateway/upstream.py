"""Models served by an upstream provider through `litellm.acompletion`.

Invariants: the client's request is forwarded as sent (unknown fields included) except
the fields the gateway owns (`model`, `stream_options`, `n`, `metadata`, `cache_salt`);
upstream usage is always requested so the tenant is charged real tokens; every
provider exception leaves as an OpenAI-shaped `ApiError` (`litellm_errors.py`); closing
the event iterator closes the upstream stream.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gateway.backend import (ChatEvent, Finished, Prepared, TextDelta, TokenChoice, ToolCallDelta, Usage)
from gateway.config import UpstreamModelConfig
from gateway.embeddings import EmbeddingsRequest, reply_body
from gateway.errors import ApiError, context_length_exceeded, invalid_request
from gateway.litellm_errors import map_litellm_error
from gateway.schemas import ChatCompletionRequest, CompletionRequest

OWNED_FIELDS = ("model", "stream_options", "n", "metadata", "cache_salt")


def import_litellm():
    """Import litellm without it reaching for the network at import time."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    return litellm


def estimate_num_tokens(value: Any) -> int:
    """A cheap upper-ish estimate (4 bytes per token) used only for up-front reservation;
    the real usage from the provider trues it up afterwards."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode()) // 4 + 8


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def usage_from(raw: Any, fallback: Usage) -> Usage:
    if raw is None:
        return fallback
    details = _field(raw, "prompt_tokens_details")
    return Usage(num_prompt_tokens=_field(raw, "prompt_tokens", 0) or 0,
                 num_completion_tokens=_field(raw, "completion_tokens", 0) or 0,
                 num_cached_tokens=(_field(details, "cached_tokens", 0) or 0) if details else 0)


@dataclass(slots=True)
class UpstreamCall:
    """The litellm call a prepared request will make."""

    is_chat: bool
    kwargs: dict


class UpstreamBackend:
    """One upstream model; stateless apart from the litellm module it calls."""

    __slots__ = ("config", "model_id", "owned_by", "default_completion_reserve_tokens",
                 "_litellm")

    def __init__(self, config: UpstreamModelConfig, *,
                 default_completion_reserve_tokens: int = 256) -> None:
        self.config = config
        self.model_id = config.name
        self.owned_by = "upstream"
        self.default_completion_reserve_tokens = default_completion_reserve_tokens
        self._litellm = None

    async def start(self) -> None:
        self._litellm = import_litellm()

    def cancel_start(self) -> None:
        """Nothing to stop: the start only imports litellm (or opens a session)."""

    async def stop(self) -> None:
        return None

    def health(self) -> dict:
        return {"model": self.model_id, "kind": "upstream", "ready": self._litellm is not None}

    def worker_metrics(self) -> list[dict]:
        return []

    def router_metrics(self) -> dict:
        return {}

    def prompt_token_metrics(self) -> dict:
        return {}

    def _common_kwargs(self, body: dict, stream: bool) -> dict:
        kwargs = {k: v for k, v in body.items() if k not in OWNED_FIELDS and v is not None}
        kwargs.update(dict(self.config.litellm_params))
        kwargs["model"] = self.config.litellm_model
        kwargs["timeout"] = self.config.timeout_s
        api_base = self.config.resolved_api_base()
        api_key = self.config.resolved_api_key()
        if api_base:
            kwargs["api_base"] = api_base
        if api_key:
            kwargs["api_key"] = api_key
        if stream:
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def _prepared(self, request_id: str, tenant: str, call: UpstreamCall, num_prompt_tokens: int,
                  num_max_tokens: int | None) -> Prepared:
        limit = self.config.max_context_tokens
        if limit is not None and num_prompt_tokens + (num_max_tokens or 0) > limit:
            raise context_length_exceeded(num_prompt_tokens, num_max_tokens, limit,
                                          param="messages" if call.is_chat else "prompt")
        reserve = num_max_tokens or self.default_completion_reserve_tokens
        return Prepared(request_id=request_id, tenant=tenant, model=self.model_id,
                        num_prompt_tokens=num_prompt_tokens,
                        num_reserved_tokens=num_prompt_tokens + reserve, payload=call)

    async def prepare_chat(self, request: ChatCompletionRequest, tenant: str,
                           request_id: str) -> Prepared:
        body = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"stepahead_replay"})
        call = UpstreamCall(True, self._common_kwargs(body, request.stream))
        return self._prepared(request_id, tenant, call,
                              estimate_num_tokens(body["messages"]),
                              request.completion_limit())

    async def prepare_completion(self, request: CompletionRequest, tenant: str,
                                 request_id: str) -> Prepared:
        if isinstance(request.prompt, list) and request.prompt \
                and isinstance(request.prompt[0], (str, list)) and len(request.prompt) != 1:
            raise invalid_request("Only one prompt per request is supported.", param="prompt")
        body = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"stepahead_replay"})
        body.setdefault("max_tokens", request.max_tokens)
        call = UpstreamCall(False, self._common_kwargs(body, request.stream))
        prompt = request.prompt
        num_prompt_tokens = (len(prompt) if isinstance(prompt, list) and prompt
                             and isinstance(prompt[0], int) else estimate_num_tokens(prompt))
        return self._prepared(request_id, tenant, call, num_prompt_tokens, request.max_tokens)

    async def embed(self, request: EmbeddingsRequest) -> dict:
        """`POST /v1/embeddings` through `litellm.aembedding`; provider errors OpenAI-shaped."""
        body = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"encoding_format"})
        kwargs = self._common_kwargs(body, stream=False)
        if "dimensions" in body:
            # litellm refuses `dimensions` for models it does not know to take it; the
            # upstream is the judge (its refusal comes back as its own 400)
            kwargs["allowed_openai_params"] = [*kwargs.get("allowed_openai_params", ()), "dimensions"]
        litellm = self._litellm or import_litellm()
        try:
            raw = await litellm.aembedding(**kwargs)
        except ApiError:
            raise
        except Exception as exc:
            raise map_litellm_error(exc) from None
        return reply_body(raw, self.model_id, request.encoding_format)

    async def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        kwargs = choice_kwargs(prepared)
        is_chat = prepared.payload.is_chat
        litellm = self._litellm or import_litellm()
        call = litellm.acompletion if is_chat else litellm.atext_completion
        fallback = Usage(num_prompt_tokens=prepared.num_prompt_tokens)
        started_s = time.perf_counter()
        try:
            response = await call(**kwargs)
        except ApiError:
            raise
        except Exception as exc:
            raise map_litellm_error(exc) from None
        if not kwargs.get("stream"):
            for event in events_from_response(response, is_chat, fallback):
                yield event
            return
        try:
            async for event in events_from_stream(response, is_chat, fallback, started_s):
                yield event
        finally:
            await _close_quietly(response)


def choice_kwargs(prepared: Prepared) -> dict:
    """The upstream call for this run's choice: a given seed is offset by the choice's
    index, so that seeded choices of one request differ."""
    kwargs = prepared.payload.kwargs
    if prepared.choice and kwargs.get("seed") is not None:
        kwargs = {**kwargs, "seed": kwargs["seed"] + prepared.choice}
    return kwargs


def logprobs_from(choice: Any, is_chat: bool) -> list[TokenChoice] | None:
    """The upstream choice's `logprobs` (chat's per-token entries, or the completions
    API's parallel lists), or None when it sent none."""
    logprobs = _field(choice, "logprobs")
    if not logprobs:
        return None
    if is_chat:
        def entry(raw: Any) -> tuple[str, bytes, float]:
            token, token_bytes = _field(raw, "token") or "", _field(raw, "bytes")
            return (token, bytes(token_bytes) if token_bytes is not None else token.encode("utf-8"),
                    float(_field(raw, "logprob") or 0.0))
        return [TokenChoice(*entry(raw), top=tuple(entry(alt) for alt in _field(raw, "top_logprobs") or []))
                for raw in _field(logprobs, "content") or []]
    tokens = _field(logprobs, "tokens") or []
    values = _field(logprobs, "token_logprobs") or [0.0] * len(tokens)
    tops = _field(logprobs, "top_logprobs") or [None] * len(tokens)
    return [TokenChoice(token, token.encode("utf-8"), float(value or 0.0),
                        top=tuple((text, text.encode("utf-8"), float(v)) for text, v in (top or {}).items()))
            for token, value, top in zip(tokens, values, tops)]


def events_from_response(response: Any, is_chat: bool, fallback: Usage):
    """Events of a whole (non-streamed) reply, a litellm object or plain JSON."""
    choice = _field(response, "choices")[0]
    if is_chat:
        message = _field(choice, "message")
        content = _field(message, "content")
        if content:
            yield TextDelta(content, logprobs_from(choice, is_chat))
        for index, call in enumerate(_field(message, "tool_calls") or []):
            function = _field(call, "function")
            yield ToolCallDelta(index, _field(call, "id"), _field(function, "name"),
                                _field(function, "arguments") or "")
    else:
        text = _field(choice, "text", "")
        if text:
            yield TextDelta(text, logprobs_from(choice, is_chat))
    yield Finished(_field(choice, "finish_reason") or "stop",
                   usage_from(_field(response, "usage"), fallback))


async def events_from_stream(response: Any, is_chat: bool, fallback: Usage,
                             started_s: float) -> AsyncIterator[ChatEvent]:
    """Events of a streamed reply: an async iterator of litellm chunks or plain JSON."""
    finish_reason = "stop"
    usage = None
    ttft_s = None
    num_chunks = 0
    try:
        async for chunk in response:
            usage = _field(chunk, "usage") or usage
            for choice in _field(chunk, "choices") or []:
                finish_reason = _field(choice, "finish_reason") or finish_reason
                delta = _field(choice, "delta") if is_chat else choice
                text = _field(delta, "content" if is_chat else "text")
                if text:
                    ttft_s = ttft_s if ttft_s is not None else time.perf_counter() - started_s
                    num_chunks += 1
                    yield TextDelta(text, logprobs_from(choice, is_chat))
                for call in (_field(delta, "tool_calls") or []) if is_chat else []:
                    function = _field(call, "function")
                    ttft_s = ttft_s if ttft_s is not None else time.perf_counter() - started_s
                    yield ToolCallDelta(_field(call, "index", 0) or 0, _field(call, "id"),
                                        _field(function, "name"),
                                        _field(function, "arguments") or "")
    except ApiError:
        raise
    except Exception as exc:
        raise map_litellm_error(exc) from None
    if usage is None:
        fallback.num_completion_tokens = num_chunks
    yield Finished(finish_reason, usage_from(usage, fallback), ttft_s=ttft_s)


async def _close_quietly(response: Any) -> None:
    closer = getattr(response, "aclose", None)
    if closer is None:
        return
    try:
        await closer()
    except Exception:   # NOTE: closing a finished or broken stream must not mask the result
        pass
