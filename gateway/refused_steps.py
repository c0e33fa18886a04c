"""The traced step of a chat, completions or Responses request refused before it was prepared.

Invariant: a request whose body is a valid chat/completions or Responses request (it
passed `validate`) and that is refused before its prompt is prepared (its request checks,
an unknown model, its tenant's limits (`TenantLimiter.early_refusal`), its prompt over the
model's context, a bad completion budget; a Responses request's unknown or unfinished
`previous_response_id` or `conversation`, its background responses' room) is traced as a
failed step of its agent session, as a refused prepared request is: its error's code (else type) and message, no output (a stream's
opening, none of which was sent), and its prompt's token count when the refusal counted
it (a prompt over the context: `ApiError.num_prompt_tokens`), else none (recorded as an
upstream model's estimate is, as 0). Only the failure path calls it, so
an answered request does no work here.
"""
from __future__ import annotations

from starlette.requests import Request

from agents_trace.records import StepContext

from gateway.backend import Prepared
from gateway.collected import Reply
from gateway.errors import ApiError
from gateway.ids import new_id
from gateway.responses_format import ResponsesRequest
from gateway.schemas import ChatCompletionRequest, CompletionRequest, served_tier
from gateway.state import GatewayState
from gateway.tracing import begin_step, end_step


def trace_refusal(state: GatewayState, request: Request, body: dict,
                  parsed: ChatCompletionRequest | CompletionRequest | ResponsesRequest, tenant: str,
                  error: ApiError, *, is_chat: bool, request_id: str | None = None) -> tuple[str, StepContext | None]:
    """The request id (`request_id`, else new, as a prepared request's) and traced step
    (None when it is not traced) of a request refused with `error` before it was prepared
    (a Responses request's: the chat body it runs as, of what was known when it was
    refused: its input alone when its history was refused or not read yet; one whose chat
    body a check refuses is not traced, `responses_routes._traced_refusal`)."""
    num_choices = getattr(parsed, "n", None) or 1
    backend = state.backends.get(parsed.model)   # none for a model not served
    is_local = backend is not None and backend.owned_by == "stepahead"
    request_id = request_id or new_id("chatcmpl" if is_chat else "cmpl")
    counted = error.num_prompt_tokens
    prepared = Prepared(request_id=request_id, tenant=tenant, model=parsed.model,
                        num_prompt_tokens=counted or 0, num_reserved_tokens=0, num_choices=num_choices,
                        prompt_is_counted=counted is not None, service_tier=served_tier(parsed.service_tier) if is_local else None)
    trace = begin_step(state.tracer, request, body, prepared, is_chat=is_chat)
    if trace is not None:
        sent = Reply.of(num_choices, 1) if parsed.stream else None   # as a refused stream's
        end_step(state.tracer, trace, prepared, None, sent, None, error.code or error.type, error.message)
    return prepared.request_id, trace
