"""Models served by an upstream provider through `litellm.acompletion`.

Invariants: the client's request is forwarded as sent (unknown fields included, in
`extra_body`, so litellm never reads them) except the fields the gateway owns (`model`,
`stream_options`, `n`, `metadata`, `cache_salt`), with only the model's own credentials
(gateway/upstream_kwargs.py); upstream usage is always requested so the tenant is
charged real tokens, and a count the reply leaves out or gives as 0 is charged the
4-bytes-a-token estimate (`upstream_usage.usage_from`), never nothing; every provider
exception leaves as an OpenAI-shaped `ApiError` (`litellm_errors.py`), with the model's
key redacted from it (`own_secrets`), and one that is a 5xx is logged once, redacted
(`log_upstream_failure`), an upstream's 429 once a minute at most, in its own words
(gateway/upstream_rate_limits.py); closing the event iterator closes the upstream
stream. `timeout_s` bounds the call: no hidden SDK
retries (an upstream 429 comes back at once, with its `Retry-After`). A reply that is not
the OpenAI protocol is a 502 `upstream_error` before any of it reaches the client
(`upstream_replies.py` reads and checks it).

An upstream call reserves its prompt estimate and `max_tokens` (else the default reserve)
for each completion it bills: every `best_of` candidate (the upstream ranks them itself,
so `Prepared.best_of` stays 1); `with_choices` multiplies that by `n`. A budgeted tenant's
request that sets no completion limit is sent, and reserves, its equal share of what the
budget has left as its completion limit (`_capped_to_budget`), so the budget holds: a chat
request's `max_completion_tokens` (OpenAI's reasoning models refuse `max_tokens`), a legacy
completion's `max_tokens` (`limit_field`). A choice's finish reason is OpenAI's
(`finish_reasons.in_openai_words`), mapped from the provider's own where litellm kept it
(its "stop" for a name it does not know is not final); its `n` choices start at once
(`starts_choices_at_once`).
"""
from __future__ import annotations

import json
import logging
import os
import time
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from agents_trace.text_table import printable
from gateway.backend import ChatEvent, Prepared, WithoutWorkers
from gateway.budget_share import run_share
from gateway.config import UpstreamModelConfig
from gateway.embeddings import EmbeddingsRequest
from gateway.errors import ApiError, context_length_exceeded, invalid_request
from gateway.finish_reasons import in_openai_words, sent_finish_reason
from gateway.litellm_errors import map_litellm_error, redacted
from gateway.schemas import ChatCompletionRequest, CompletionRequest
from gateway.upstream_embeddings import embed_upstream
from gateway.upstream_kwargs import call_kwargs
from gateway.upstream_rate_limits import UpstreamRateLimits
from gateway.upstream_replies import (close_quietly, end_when_complete, events_from_response, events_from_stream,
                                     require_sse)

log = logging.getLogger("stepahead.gateway")


# pydantic's warning when it dumps a model holding a value of the wrong type (a filter's
# fields: action, message, category, module)
SERIALIZER_WARNING = ("ignore", "Pydantic serializer warnings", UserWarning, r"pydantic\.main")


def import_litellm():
    """Import litellm without it reaching for the network at import time, and without its
    two-line colour banner ("Give Feedback / Get Help", "LiteLLM.Info: ...") on stderr for
    every upstream error: those errors reach the client (and the trace) as `ApiError`s.
    Nor does pydantic's multi-line serializer warning reach the log: litellm (and the
    OpenAI SDK under it) dumps an upstream's reply before anyone checked it, so a malformed
    one (an embedding vector that is a string), which the gateway answers with a 502 of its
    own, warned from inside `aembedding`. The filter is process-wide (a per-call
    `catch_warnings` is not: concurrent calls would restore each other's filters) and
    hides only pydantic's serializer warnings; the gateway's own dumps pass `warnings=False`.
    litellm's token counter is off: a stream whose provider sent no usage would end with
    one litellm counted with its tokenizer (55 completion tokens for two short tool calls,
    QA226), where the gateway charges its own estimate, as for a whole reply (the counter
    then gives 0: upstream_usage.py); it also spares the tokenizer's work at each stream's end."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    litellm.suppress_debug_info = True
    litellm.disable_token_counter = True
    action, message, category, module = SERIALIZER_WARNING
    if not any(entry[0] == action and entry[1] is not None and entry[1].pattern == message
               and entry[2] is category for entry in warnings.filters):
        warnings.filterwarnings(action, message=message, category=category, module=module)
    return litellm


def estimate_num_tokens(value: Any) -> int:
    """A cheap upper-ish estimate (4 bytes per token) of a prompt: reserved up front, then
    trued up by the provider's usage, or charged where the reply does not count the prompt."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode()) // 4 + 8


@dataclass(slots=True)
class UpstreamCall:
    """The litellm call a prepared request will make."""

    is_chat: bool
    kwargs: dict


# the largest budget share sent as a completion limit to a model of unknown context: every
# current chat model takes at least this many output tokens
SENT_SHARE_WITHOUT_CONTEXT = 4096


class UpstreamBackend(WithoutWorkers):
    """One upstream model; stateless apart from the litellm module it calls and the log
    of its upstream's 429s (`rate_limits`)."""

    __slots__ = ("config", "model_id", "owned_by", "default_completion_reserve_tokens",
                 "tenant_budget_room", "rate_limits", "_litellm")

    def __init__(self, config: UpstreamModelConfig, *,
                 default_completion_reserve_tokens: int = 256,
                 tenant_budget_room: Callable[[str], int | None] | None = None) -> None:
        self.config = config
        self.model_id = config.name
        self.owned_by = "upstream"
        self.default_completion_reserve_tokens = default_completion_reserve_tokens
        # what a tenant's request may reserve when it sets no max_tokens (`Limiters.budget_room`)
        self.tenant_budget_room = tenant_budget_room
        self.rate_limits = UpstreamRateLimits(config.name)
        self._litellm = None

    async def start(self) -> None:
        self._warn_of_missing_key()
        self._litellm = import_litellm()

    def _warn_of_missing_key(self) -> None:
        """One warning line at the start when the model's `api_key_env` variable is unset."""
        warning = self.config.missing_variables_warning()
        if warning:
            log.warning("stepahead: model %r: %s", self.model_id, warning)

    def cancel_start(self) -> None:
        """Nothing to stop: the start only imports litellm (or opens a session)."""

    async def stop(self) -> None:
        return None

    def health(self) -> dict:
        return {"model": self.model_id, "kind": "upstream", "ready": self._litellm is not None}

    def _common_kwargs(self, body: dict, stream: bool) -> dict:
        """litellm's keyword arguments for the client's `body` (gateway/upstream_kwargs.py)."""
        return call_kwargs(self.config, body, stream)

    def _prepared(self, request_id: str, tenant: str, call: UpstreamCall, num_prompt_tokens: int,
                  num_max_tokens: int | None, num_calls: int = 1, num_candidates: int = 1) -> Prepared:
        """One of `num_calls` (`n`) calls, reserving its prompt and `num_candidates` (`best_of`) budgets."""
        limit = self.config.max_context_tokens
        if limit is not None and num_prompt_tokens + (num_max_tokens or 0) > limit:
            raise context_length_exceeded(num_prompt_tokens, num_max_tokens, limit,
                                          param="messages" if call.is_chat else "prompt")
        if num_max_tokens is None:
            num_max_tokens = self._capped_to_budget(tenant, call, num_prompt_tokens, num_calls, num_candidates)
        reserve = (num_max_tokens or self.default_completion_reserve_tokens) * num_candidates
        return Prepared(request_id=request_id, tenant=tenant, model=self.model_id,
                        num_prompt_tokens=num_prompt_tokens,
                        num_reserved_tokens=num_prompt_tokens + reserve, payload=call, prompt_is_counted=False)

    def _capped_to_budget(self, tenant: str, call: UpstreamCall, num_prompt_tokens: int, num_calls: int,
                          num_candidates: int) -> int | None:
        """The completion limit reserved, and sent (in `call`, in its `limit_field`), for a
        budgeted tenant's request that set none: each of its completions' share of the budget
        left after every call's prompt (`run_share`), within `max_context_tokens` when set;
        None (nothing sent) for a tenant without a budget. A model whose context is not
        configured is sent a share only up to SENT_SHARE_WITHOUT_CONTEXT (a larger limit than
        the model takes would be refused by the upstream, naming a field the client never
        sent): a larger share is reserved only, the budget then holding all but what the
        model writes past it."""
        budget_room = getattr(self, "tenant_budget_room", None)   # NOTE: a test's bare backend has none
        room = None if budget_room is None else budget_room(tenant)
        if room is None:
            return None
        cap = run_share(room, num_prompt_tokens * num_calls, num_calls * num_candidates)
        limit = self.config.max_context_tokens
        if limit is not None:
            cap = max(1, min(cap, limit - num_prompt_tokens))
        if limit is not None or cap <= SENT_SHARE_WITHOUT_CONTEXT:
            name = limit_field(call)
            sent = call.kwargs.get(name)
            call.kwargs[name] = min(sent, cap) if isinstance(sent, int) else cap
        return cap

    async def prepare_chat(self, request: ChatCompletionRequest, tenant: str,
                           request_id: str) -> Prepared:
        body = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"stepahead_replay"})
        call = UpstreamCall(True, self._common_kwargs(body, request.stream))
        return self._prepared(request_id, tenant, call,
                              estimate_num_tokens(body["messages"]),
                              request.completion_limit(), num_calls=request.n or 1)

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
        return self._prepared(request_id, tenant, call, num_prompt_tokens, request.max_tokens,
                              num_calls=request.n or 1, num_candidates=request.best_of or 1)

    async def embed(self, request: EmbeddingsRequest, *, tenant: str | None = None,
                    request_id: str | None = None) -> dict:
        """`POST /v1/embeddings` through `litellm.aembedding` (gateway/upstream_embeddings.py);
        a failure is logged as a chat run's is (`log_failure`: a 5xx, under the request's
        `x-request-id` and tenant, "-" where the caller gave none; a 429 in `rate_limits`)."""
        try:
            return await embed_upstream(self.model_id, self.config, self._common_kwargs,
                                        self._litellm or import_litellm(), self.own_secrets(), request)
        except ApiError as error:   # redacted already
            log_failure(request_id, tenant, self.model_id, error)
            self.rate_limits.note(error)
            raise

    def own_secrets(self) -> tuple[str, ...]:
        """The key(s) this model sends upstream, never to be quoted back in an error."""
        return tuple(key for key in (self.config.resolved_api_key(),
                                     dict(self.config.litellm_params).get("api_key"))
                     if isinstance(key, str) and key)

    async def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        kwargs = choice_kwargs(prepared)
        is_chat = prepared.payload.is_chat
        litellm = self._litellm or import_litellm()
        call = litellm.acompletion if is_chat else litellm.atext_completion
        started_s = time.perf_counter()
        try:
            try:
                response = await call(**kwargs)
            except ApiError:
                raise
            except Exception as exc:
                raise map_litellm_error(exc, prompt_param="messages" if is_chat else "prompt") from None
            if not kwargs.get("stream"):
                sent = sent_finish_reason(response)   # the provider's own, where litellm said "stop"
                for event in events_from_response(response, is_chat, prepared.num_prompt_tokens):
                    yield in_openai_words(event, sent)
                return
            try:
                await require_sse(response)
                raw = end_when_complete(response)   # notes the provider's finish reason (chat)
                async for event in events_from_stream(response, is_chat, prepared.num_prompt_tokens, started_s,
                                                      finish_may_be_made_up=True):
                    yield in_openai_words(event, raw.sent_reason if raw is not None else None)
            finally:
                await close_quietly(response)
        except ApiError as error:   # an upstream may quote the key it was sent
            raise self.failed(prepared, error) from None

    def failed(self, prepared: Prepared, error: ApiError) -> ApiError:
        """`error`, which ended `prepared`'s run, with this model's key taken out
        (`redacted`), logged when it is the gateway's failure (`log_upstream_failure`) or
        the upstream's 429 (`rate_limits`: once a minute at most)."""
        error = redacted(error, self.own_secrets())
        log_upstream_failure(prepared, error)
        self.rate_limits.note(error)
        return error


def log_upstream_failure(prepared: Prepared, error: ApiError) -> None:
    """One WARNING line for a run that failed with a 5xx (the upstream's or the gateway's
    fault, not the client's): the request's id (the client's `x-request-id`; a choice's,
    `-N` added, when it asked for several), tenant and model, and the error's status, code
    and message: redacted already (no key, no `Bearer` value, no upstream address), escaped
    to one printable line. A run ends once, so a request logs once, never per token (one
    with several choices: once per choice that failed before the first failure ended the
    rest); a client's own mistake (4xx) is not logged."""
    log_failure(prepared.request_id, prepared.tenant, prepared.model, error)


def log_failure(request_id: str | None, tenant: str | None, model: str, error: ApiError) -> None:
    """`log_upstream_failure`'s line for any upstream call (an embeddings request's too):
    nothing for a 4xx; "-" for an id or tenant the caller does not know."""
    if error.status < 500:
        return
    log.warning("stepahead: upstream failure: request %s, tenant %s, model %s: %d %s: %s",
                printable(request_id or "-"), printable(tenant or "-"), printable(model),
                error.status, error.code, printable(error.message))


def limit_field(call: UpstreamCall) -> str:
    """The field a budget share is sent in: the limit the call carries already (the operator's
    `litellm_params`: a client's own is never capped), else `max_completion_tokens` on chat
    (OpenAI's reasoning models refuse `max_tokens`, which the passthrough would forward as
    is), `max_tokens` on legacy completions (their only limit)."""
    for name in ("max_completion_tokens", "max_tokens"):
        if call.kwargs.get(name) is not None:
            return name
    return "max_completion_tokens" if call.is_chat else "max_tokens"


def choice_kwargs(prepared: Prepared) -> dict:
    """The upstream call for this run's choice: a given seed is offset by the choice's
    index, so that seeded choices of one request differ."""
    kwargs = prepared.payload.kwargs
    if prepared.choice and kwargs.get("seed") is not None:
        kwargs = {**kwargs, "seed": kwargs["seed"] + prepared.choice}
    return kwargs
