"""POST /v1/responses/input_tokens: the prompt tokens a Responses create request would send.

Invariants: authentication first and errors OpenAI-shaped, as for every handler; nothing
runs and no tokens, budget or concurrency slot are taken, but each count whose request is
valid and whose model is a local one is one request of its tenant's `requests_per_minute`,
taken before its prompt is rendered and tokenized (QA134 H6: the tokenizer's work, seconds
for a prompt of megabytes, was free, so a tenant could stall the event loop at will); a
tenant with none left is refused the usual 429 with `Retry-After`, counted in
`stepahead_rejected_total`. Its answers carry the tenant's `x-ratelimit-*` headers.
The count is the create request's prompt (same template, instructions, history, tools,
`truncation: "auto"` cuts), however far past the context, up to a rendered prompt of
`prompt_count.MAX_COUNTED_CHARS` characters (FI154); tokenizing stays off the event loop.
"""
from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.backend import Backend, Prepared
from gateway.config import UNAUTHENTICATED
from gateway.errors import ApiError, invalid_request
from gateway.exchange import take_request
from gateway.http_io import read_json_body
from gateway.ids import new_id
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_history import history_before
from gateway.responses_routes import check_something_to_answer, prepared_chat
from gateway.routes import gateway_state, model_label, refusal
from gateway.schemas import ChatCompletionRequest, validate
from gateway.state import GatewayState


async def count_input_tokens(request: Request) -> Response:
    """POST /v1/responses/input_tokens: the prompt tokens the same create request would
    send (instructions, `previous_response_id`'s conversation, input, tools; after
    `truncation: "auto"`), counted by the local model's own tokenizer and chat template.
    An input past the model's context is counted too (a client counts to learn it must
    trim), even one the create request refuses untokenized, its length alone past the
    context; only a rendered prompt of more than `prompt_count.MAX_COUNTED_CHARS`
    characters (1 Mi: seconds of tokenizing) keeps that 400 `context_length_exceeded`
    ("at least N tokens").
    Nothing runs; the count is one request of the tenant's `requests_per_minute` (taken
    before its prompt is tokenized; a 429 with `Retry-After` when none is left), and takes
    no tokens and no slot. Upstream models are a 400: the gateway holds no tokenizer for
    them, and an estimate would read as a count."""
    state = gateway_state(request)
    tenant, model = UNAUTHENTICATED, ""
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        model = model_label(state, body, tenant)
        parsed = validate(ResponsesRequest, body)   # `input` left out is [] (the model's default)
        history = await history_before(state, tenant, parsed)
        if parsed.instructions is None:   # (instructions alone are counted: what they cost is worth knowing)
            check_something_to_answer(parsed, history)   # nothing at all: the create request's 400 (QA229 F2)
        backend = state.backend(parsed.model, tenant)
        model = parsed.model
        if backend.owned_by == "upstream":
            raise invalid_request(f"Input tokens are counted for local models only; '{model}' is an upstream "
                                  "model.", param="model", code="model_not_supported")
        take_request(state, tenant)
        sources: list[tuple[str, ...]] = []
        num_tokens = await _counted(state, backend, parsed, to_chat_body(parsed, history, sources), sources, tenant)
        state.metrics.record_request(tenant, model, "input_tokens", 200)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": num_tokens},
                            headers=state.limiters[tenant].rate_limit_headers())
    except ApiError as error:
        state.metrics.record_request(tenant, model, "input_tokens", error.status)
        return refusal(state, error, tenant, None)


async def _counted(state: GatewayState, backend: Backend, parsed: ResponsesRequest, chat_body: dict,
                   sources: list[tuple[str, ...]], tenant: str) -> int:
    """The prompt tokens of the request as the create request would prepare it (cut first
    with `truncation: "auto"`, exactly as it cuts), whether or not they fit the model's
    context: counting is how a client learns it must trim (QA224 F4), so the create
    request's `context_length_exceeded` answers with the count it made, and the prompt it
    refused untokenized ("at least N tokens", its length alone past the context) is counted
    now (FI154; up to `prompt_count.MAX_COUNTED_CHARS`); its other refusals stand."""
    recording = _RefusalRecording(backend)
    try:
        _, prepared = await prepared_chat(state, recording, parsed, chat_body, sources, tenant, new_id("count"))
    except ApiError as error:
        if error.code != "context_length_exceeded":
            raise
        if error.num_prompt_tokens is not None:
            return error.num_prompt_tokens
        count = getattr(backend, "count_chat_prompt", None)   # (local models only refuse untokenized)
        num_tokens = None if count is None or recording.refused is None else await count(recording.refused)
        if num_tokens is None:
            raise   # past what is counted: the create request's "at least N" 400
        return num_tokens
    return prepared.num_prompt_tokens


@dataclass(slots=True)
class _RefusalRecording:
    """`backend` for `prepared_chat`, keeping the last chat request its `prepare_chat`
    refused untokenized (`context_length_exceeded` without `num_prompt_tokens`). That is
    the one `prepared_chat` raises such a refusal for: a request it tries alone, or, with
    `truncation: "auto"`, the fullest cut, which it tries last (responses_truncation.py)."""
    backend: Backend
    refused: ChatCompletionRequest | None = None

    async def prepare_chat(self, request: ChatCompletionRequest, tenant: str, request_id: str) -> Prepared:
        try:
            return await self.backend.prepare_chat(request, tenant, request_id)
        except ApiError as error:
            if error.code == "context_length_exceeded" and error.num_prompt_tokens is None:
                self.refused = request
            raise
