"""POST /v1/responses/input_tokens: the prompt tokens a Responses create request would send.

Invariants: authentication first and errors OpenAI-shaped, as for every handler; nothing
runs and no tokens, budget or concurrency slot are taken, but each count whose request is
valid and whose model is a local one is one request of its tenant's `requests_per_minute`,
taken before its prompt is rendered and tokenized (QA134 H6: the tokenizer's work, seconds
for a prompt of megabytes, was free, so a tenant could stall the event loop at will); a
tenant with none left is refused the usual 429 with `Retry-After`, counted in
`stepahead_rejected_total`. Its answers carry the tenant's `x-ratelimit-*` headers.
"""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.backend import Backend
from gateway.config import UNAUTHENTICATED
from gateway.errors import ApiError, invalid_request
from gateway.exchange import take_request
from gateway.http_io import read_json_body
from gateway.ids import new_id
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_history import history_before
from gateway.responses_routes import prepared_chat
from gateway.routes import gateway_state, model_label, refusal
from gateway.schemas import validate
from gateway.state import GatewayState


async def count_input_tokens(request: Request) -> Response:
    """POST /v1/responses/input_tokens: the prompt tokens the same create request would
    send (instructions, `previous_response_id`'s conversation, input, tools; after
    `truncation: "auto"`), counted by the local model's own tokenizer and chat template.
    An input past the model's context is counted too (a client counts to learn it must
    trim): only a prompt whose length alone proves it past the context (more characters
    than the context holds tokens times the longest token's) is refused uncounted, the
    create request's 400 `context_length_exceeded` ("at least N tokens").
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
    with `truncation: "auto"`), whether or not they fit the model's context: counting is
    how a client learns it must trim (QA224 F4), so the create request's
    `context_length_exceeded` answers with the count it made; its other refusals stand."""
    try:
        _, prepared = await prepared_chat(state, backend, parsed, chat_body, sources, tenant, new_id("count"))
    except ApiError as error:
        if error.code != "context_length_exceeded" or error.num_prompt_tokens is None:
            raise   # (a prompt refused uncounted, its length alone past the context: "at least N" tokens)
        return error.num_prompt_tokens
    return prepared.num_prompt_tokens
