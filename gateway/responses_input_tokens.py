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


async def count_input_tokens(request: Request) -> Response:
    """POST /v1/responses/input_tokens: the prompt tokens the same create request would
    send (instructions, `previous_response_id`'s conversation, input, tools; after
    `truncation: "auto"`), counted by the local model's own tokenizer and chat template.
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
        if isinstance(body, dict):
            body = {"input": [], **body}
        parsed = validate(ResponsesRequest, body)
        history = await history_before(state, tenant, parsed)
        backend = state.backend(parsed.model, tenant)
        model = parsed.model
        if backend.owned_by == "upstream":
            raise invalid_request(f"Input tokens are counted for local models only; '{model}' is an upstream "
                                  "model.", param="model", code="model_not_supported")
        take_request(state, tenant)
        sources: list[tuple[str, ...]] = []
        _, prepared = await prepared_chat(state, backend, parsed, to_chat_body(parsed, history, sources), sources,
                                          tenant, new_id("count"))
        state.metrics.record_request(tenant, model, "input_tokens", 200)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": prepared.num_prompt_tokens},
                            headers=state.limiters[tenant].rate_limit_headers())
    except ApiError as error:
        state.metrics.record_request(tenant, model, "input_tokens", error.status)
        return refusal(state, error, tenant, None)
