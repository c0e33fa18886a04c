"""HTTP handler of the Responses API that makes a response: POST /v1/responses (those
that read, cancel or delete a stored one: stored_responses_routes.py; that counts its
input tokens: responses_input_tokens.py).

A request continues a conversation from `previous_response_id` (the stored response's)
or `conversation` (the Conversations API's items; its input and output are added to it
once the response is done, `completed` or `incomplete`).

A request runs as a chat completion (responses_format.py). With `background: true` it runs
detached (background_responses.py): the POST answers at once with the `queued` response
(or streams its events), GET polls it, `?stream=true&starting_after=N` replays and follows
its events, cancel stops it. A stream that fails once begun (its id announced) is stored
`failed` with its error, background or not (with `store`), so the id reads back.
What a client is answered as a success was kept first (`KeptBeforeTheEnd`): a stored
response's row is in the file, and a `conversation`'s turn in the conversation, before the
end is sent (a background run's `queued` row before its id is handed out); a write that
fails is a 500 saying so (a begun stream's `response.failed`), so another gateway sharing
the files, or this one after a crash, finds whatever was answered.
A stored foreground response is found as it runs (`live_responses`, until its end or
failure is put in the store, or it closed without one): GET answers it `in_progress`,
DELETE forgets it (its end is then not stored; a `conversation`'s turn is still added).

Invariants: as for every handler, authentication first and errors OpenAI-shaped; a
tenant never reaches another tenant's responses or runs (their ids answer 404).
"""
from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agents_trace.ordered_ids import time_ordered_hex
from agents_trace.records import StepContext
from gateway.config import UNAUTHENTICATED
from gateway.background_responses import BackgroundJob, generate
from gateway.background_runs import BackgroundRun
from gateway.background_stream import run_event_stream
from gateway.backend import Backend, Prepared
from gateway.chat_checks import check_chat_request, check_message_count
from gateway.errors import ApiError, invalid_request, rate_limited
from gateway.exchange import CLIENT_CLOSED_STATUS, session_headers
from gateway.refused_steps import trace_refusal
from gateway.respond import ReplyShape, respond
from gateway.forecasting import bind_session
from gateway.http_io import ClientGone, read_json_body
from gateway.live_responses import LiveResponse
from gateway.collected import Collected
from gateway.response_store import SHUT_DOWN, StoredResponse, stopped_error
from gateway.conversation_items import traced_in_conversation, turn_items
from gateway.conversation_locks import ConversationHold
from gateway.request_metadata import checked_metadata
from gateway.metrics_genai import record_refused_request
from gateway.responses_format import ResponsesRequest, conversation_after, to_chat_body
from gateway.responses_history import history_before, kept_item_named
from gateway.responses_keep import KeptBeforeTheEnd
from gateway.responses_errors import ErrorsRenamed, renamed
from gateway.responses_objects import input_items
from gateway.responses_stream import ResponsesStreamWriter, failure_details, whole_response
from gateway.responses_truncation import TurnCuts, fewest_turns_cut, is_too_long
from gateway.routes import gateway_state, model_label, refusal
from gateway.schema_checks import check_off_loop, tool_parameters
from gateway.schemas import ChatCompletionRequest, validate
from gateway.service_tiers import request_tier
from gateway.state import GatewayState
from gateway.tracing import begin_step

async def create_response(request: Request) -> Response:
    """POST /v1/responses; with `store` (the default) the response is kept for
    `previous_response_id` and GET."""
    started_s = time.perf_counter()
    state = gateway_state(request)
    tenant, model, request_id, trace, traced_body = UNAUTHENTICATED, "", None, None, None
    parsed, history, response_id = None, (), None   # what a refusal is traced with (`_traced_refusal`)
    hold = ConversationHold.nothing()   # on its conversation, until the request has ended (`conversation_locks`)
    live = LiveResponse.nothing()   # a stored foreground response as it runs, for GET and DELETE (`live_responses`)
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        model = model_label(state, body, tenant)   # a request refused by its checks counts under its model too
        check_message_count(body, "input")
        checked = validate(ResponsesRequest, body)
        checked_metadata(checked.metadata)   # out of range: no valid request, untraced (request_metadata)
        parsed = checked
        response_id = f"resp_{time_ordered_hex(time.time(), 44)}"   # the archive's key: in time order
        if parsed.background and not parsed.store:
            raise invalid_request("A background response is stored: `background: true` needs `store: true`.",
                                  param="store", code="invalid_value")
        if parsed.background:
            _check_room_for_background(state, tenant)
        hold = state.conversation_locks.take(tenant, parsed.conversation_id())
        history = await history_before(state, tenant, parsed)
        check_something_to_answer(parsed, history)   # `input` may be left out, not with nothing else
        backend = state.backend(parsed.model, tenant)  # an unknown model is a 404 before its name is a metric label
        if parsed.conversation is not None:   # a turn whose input alone cannot be kept runs no model
            await state.conversations.check_turn_room(tenant, turn_items(input_items(parsed, response_id), []),
                                                      state.config.conversation_bytes_per_tenant)
        model = parsed.model
        parsed.service_tier = request_tier(request, tenant, parsed.service_tier, backend)
        sources: list[tuple[str, ...]] = []
        traced_body = traced_in_conversation(to_chat_body(parsed, history, sources), parsed)
        chat_body, prepared = await prepared_chat(state, backend, parsed, traced_body, sources, tenant, response_id)
        created_at = int(time.time())
        request_id = prepared.request_id

        def keep_failed(failed: dict) -> None:   # a foreground stream failed once begun: stored, unless deleted
            if not live.is_deleted:
                live.end()   # the store answers for it from here on
                keep(failed, None)

        writer = ResponsesStreamWriter(response_id, parsed, created_at,
                                       on_failed=None if parsed.background else keep_failed)
        if parsed.store and not parsed.background:   # GET, DELETE, input_items find it as it runs (QA224 F5)
            live = state.live_responses.register(tenant, response_id, writer.snapshot,
                                                 input_items(parsed, response_id))

        def keep(response: dict, collected: Collected | None) -> None:   # not waited for (`put`)
            if parsed.store:
                messages = () if collected is None else conversation_after(parsed, traced_body, collected)
                state.responses.put(tenant, StoredResponse(response, messages, input_items(parsed, response_id)))

        async def keep_end(collected: Collected) -> None:   # waited for: see `KeptBeforeTheEnd`
            response = whole_response(response_id, parsed, collected, created_at)
            # a background run stores its end itself (`generate`); one deleted as it ran is not stored
            stores = parsed.store and not parsed.background and not live.is_deleted
            live.end()   # the store answers for it from here on (the put below remembers it at once)
            if stores:
                await state.responses.put_and_wait(tenant, StoredResponse(
                    response, conversation_after(parsed, traced_body, collected), input_items(parsed, response_id)),
                    durable=True)
            if parsed.conversation is not None:
                try:
                    await state.conversations.append(tenant, parsed.conversation_id(),
                                                     turn_items(input_items(parsed, response_id), response["output"]),
                                                     cap=state.config.conversation_bytes_per_tenant)
                except ApiError as error:   # its stored row says it failed, before the client hears: it continues nothing
                    if stores:   # (a background run stores its failure itself)
                        await state.responses.put_and_wait(tenant, StoredResponse(
                            {**response, "status": "failed", "error": failure_details(error.body())}, (),
                            input_items(parsed, response_id)), durable=True)
                    raise
                hold.release()   # the turn is in: the next may come as the client reads this end (QA128)
        if parsed.background:   # stored before anything runs or is traced: a row the file cannot take is a 500
            run = await _stored_queued(state, tenant, writer)
        trace = begin_step(state.tracer, request, chat_body, prepared, is_chat=True, started_s=started_s,
                           instructions=parsed.instructions)
        bind_session(prepared, trace)
        backend = ErrorsRenamed(backend, sources)   # its run's errors named as the Responses API names them
        if parsed.conversation is not None or (parsed.store and not parsed.background):
            backend = KeptBeforeTheEnd(backend, keep_end)
        if parsed.background:
            async def prepare_again() -> Prepared:   # its budget share as it stands when it asks again
                again = (await prepared_chat(state, backend, parsed, traced_body, sources, tenant, response_id))[1]
                bind_session(again, trace)
                return again
            return _start_background(state, BackgroundJob(state, backend, prepared, writer, keep, started_s,
                                                          trace, prepare_again, hold.release),
                                     run, stream=parsed.stream)

        def closed() -> None:   # the request ended, whichever way
            hold.release()
            live.end()

        shape = ReplyShape("responses", lambda reply, _: whole_response(response_id, parsed, reply.first, created_at),
                           lambda: writer, on_closed=closed)   # (a failed stream is stored: `keep_failed`)
        return await respond(request, state, backend, prepared, is_chat=True, stream=parsed.stream,
                             include_usage=False, started_s=started_s, trace=trace, shape=shape)
    except ApiError as error:
        hold.release()
        live.end()
        state.metrics.record_request(tenant, model, "responses", error.status)
        record_refused_request(state.metrics, tenant, "responses", model, time.perf_counter() - started_s, error)
        if parsed is not None and request_id is None:   # a valid request refused before it was prepared
            request_id, trace = _traced_refusal(state, request, parsed, traced_body or history, tenant, error,
                                                response_id)
        return refusal(state, error, tenant, request_id, trace)
    except ClientGone:
        hold.release()
        live.end()
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except BaseException:   # a bug (a 500), or cancelled
        hold.release()
        live.end()
        raise


def _traced_refusal(state: GatewayState, request: Request, parsed: ResponsesRequest,
                    known: dict | tuple[dict, ...], tenant: str, error: ApiError,
                    response_id: str) -> tuple[str | None, StepContext | None]:
    """(request id, traced step) of a valid request refused with `error` before it was
    prepared, traced as the chat request it runs as (`trace_refusal`): `known`, that chat
    body once it was made, else the history read so far (none: its `previous_response_id`
    or `conversation` was refused, or it was refused before they were read), its input
    after it; (None, None) when no chat body can be made of it (a check `to_chat_body`
    makes refused it: answered untraced, as a body that is no valid request is)."""
    if isinstance(known, dict):
        chat_body = known
    else:
        try:
            chat_body = traced_in_conversation(to_chat_body(parsed, known), parsed)
        except ApiError:
            return None, None
    return trace_refusal(state, request, chat_body, parsed, tenant, error, is_chat=True, request_id=response_id)


def check_something_to_answer(request: ResponsesRequest, history: tuple[dict, ...]) -> None:
    """A 400 `missing_required_parameter` naming `input` when the model would be given
    nothing to answer: no input (left out, `[]`, or `reasoning` items alone, which are
    dropped) and no history (no `previous_response_id`, and a `conversation` without
    items that reach the model). `instructions` alone are no question: a request must
    give the model a turn to answer, as OpenAI's `input`, optional, lets `conversation` or
    `previous_response_id` give it (QA224 F3)."""
    items = request.input
    if history or isinstance(items, str) or any(item.get("type", "message") != "reasoning" for item in items):
        return
    raise invalid_request("Missing required parameter: 'input'. Give the input to answer, or a 'conversation' "
                          "with items or a 'previous_response_id' to continue.", param="input",
                          code="missing_required_parameter")


def _check_room_for_background(state: GatewayState, tenant: str) -> None:
    """A 429 (`rate_limit_exceeded`) when the tenant's unfinished background responses
    already fill its stored responses (`[server] responses_per_tenant`) but the one place
    kept for a finished response: an unfinished one is never pushed out of the store
    (`response_store`), so one more would leave no room for the responses that end."""
    capacity = state.responses.capacity
    unfinished = state.responses.num_unfinished(tenant)
    if unfinished >= capacity - 1:
        raise rate_limited(f"Too many background responses: {unfinished} are queued or in progress, and a tenant "
                           f"may have {max(capacity - 1, 0)} at once (`[server] responses_per_tenant` = {capacity}, "
                           "less one place for a finished response). Retry once one has ended, or cancel one.",
                           retry_after_s=1)


async def _stored_queued(state: GatewayState, tenant: str, writer: ResponsesStreamWriter) -> BackgroundRun:
    """A background run, stored `queued` (`store: false` was refused) before it runs and its
    id is handed out, so that id is found after a crash too (ended): a row the file cannot
    take is a 500, and nothing runs. A request cancelled meanwhile (the shutdown) stores it
    `failed` (`stopped_error`: the gateway stopped, not a client's cancel), the store's
    thread keeping the order of writes."""
    run = BackgroundRun(tenant, writer.response_id, writer.snapshot, input_items(writer.request, writer.response_id))
    run.append(writer.queued())
    try:
        await state.responses.put_and_wait(tenant, StoredResponse(run.response(), (), run.input_items), durable=True)
    except asyncio.CancelledError:
        stopped = writer.snapshot("failed", error=stopped_error(SHUT_DOWN))
        state.responses.put(tenant, StoredResponse(stopped, (), run.input_items))
        raise
    return run


def _start_background(state: GatewayState, job: BackgroundJob, run: BackgroundRun, *, stream: bool) -> Response:
    """Start the stored run and answer it `queued` (or stream its events), either way
    with its id as `x-request-id` (its traced step's), the session its step is traced
    under (`x-session-id`) and the tenant's rate limits, as a foreground answer has them
    (counting the run's request and reserved tokens, which it takes once admitted)."""
    queued = run.response()
    headers = {"x-request-id": run.response_id, **session_headers(job.trace),
               **state.limiters[run.tenant].rate_limit_headers(job.prepared.num_reserved_tokens)}
    state.background.start(run, lambda started: generate(job, started))
    if stream:
        return run_event_stream(run, -1, headers)
    return JSONResponse(queued, headers=headers)


async def prepared_chat(state: GatewayState, backend: Backend, parsed: ResponsesRequest, chat_body: dict,
                         sources: list[tuple[str, ...]], tenant: str, response_id: str) -> tuple[dict, Prepared]:
    """(the chat body, the prepared request) a Responses request runs as on `backend`;
    with `truncation: "auto"` its oldest turns, then the last turn's oldest tool rounds
    (responses_truncation.py), are dropped until the prompt fits the model's context (none when `max_output_tokens` alone fills it: the error names that,
    not the messages), from this prompt only: a response stores `chat_body` uncut (QA154).
    Errors name the Responses API's parameters (`sources`: per chat message, where from)."""
    async def prepared(num_cut: int) -> tuple[dict, Prepared]:
        body = chat_body if num_cut == 0 else {**chat_body, "messages": cuts.kept(chat_body["messages"], num_cut)}
        chat = validate(ChatCompletionRequest, body)
        await check_off_loop(state.schemas, tenant, tool_parameters(chat), check_chat_request, chat, tenant,
                             state.schemas, False)   # calls and their outputs pair by call_id, wherever they are
        return body, await backend.prepare_chat(chat, tenant, response_id)

    try:
        return await prepared(0)   # (cuts nothing: `cuts` is not read)
    except ApiError as error:
        cuts = TurnCuts.of(chat_body["messages"]) if parsed.truncation == "auto" and is_too_long(error) else None
        if cuts is None or not cuts.num_cuts:
            raise await kept_item_named(state, tenant, parsed, renamed(error, sources)) from None
    num_cut, outcome = await fewest_turns_cut(cuts, prepared)
    if isinstance(outcome, ApiError):
        raise renamed(outcome, cuts.kept(sources, num_cut)) from None
    return outcome
