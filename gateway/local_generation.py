"""Driving a local engine for one request: free generation, and forced tool calls.

Invariants: every engine stream is closed when we stop reading it (so the worker cancels
the request and frees its blocks); an `ErrorEvent` becomes an `ApiError` (503 when it
happened before any output, after one retry on another worker; 500 otherwise); usage
counts every token the workers generated for the request, across the several short
generations of a forced tool call; a forced call never exceeds the request's
`max_tokens` in total.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

from shards.protocol import ErrorEvent, FinishEvent, TokenEvent, WorkItem

from gateway.backend import ChatEvent, Finished, Prepared, TextDelta, ToolCallDelta, Usage
from gateway.errors import ApiError, server_error, unavailable
from gateway.openai_format import new_tool_call_id
from gateway.tool_calls import CallPiece, ToolCallStreamParser
from gateway.tool_forcing import CALL_OPEN, call_head, choose_tool_name, forced_arguments

MAX_NAME_TOKENS = 16


@dataclass(slots=True)
class ForcedCall:
    """The reply must be a call: to `name`, or (None) to a tool the model picks."""

    schemas: dict[str, dict | None]
    name: str | None


@dataclass(slots=True)
class LocalCall:
    """What `run()` sends: the prompt, sampling, and how to treat tools.

    `tool_names` is None when the request offered no tools (output is plain text).
    """

    prompt_token_ids: list[int]
    sampling: object
    session: str | None
    tool_names: frozenset[str] | None
    forced: ForcedCall | None
    keep_one_call: bool


def error_from_event(event: ErrorEvent, produced_output: bool) -> ApiError:
    message = f"The model worker failed: {event.message}"
    if event.retryable and not produced_output:
        return unavailable(message, code=event.code)
    return server_error(message, code=event.code)


async def engine_events(engine, item: WorkItem) -> AsyncIterator[TokenEvent | FinishEvent]:
    """`engine.generate(item)`, retried once when a worker failed before any token."""
    for attempt in range(2):
        produced = False
        retry = False
        request = item if attempt == 0 else dataclasses.replace(
            item, request_id=f"{item.request_id}-retry")
        async with contextlib.aclosing(engine.generate(request)) as events:
            async for event in events:
                if isinstance(event, ErrorEvent):
                    if event.retryable and not produced and attempt == 0:
                        retry = True
                        break
                    raise error_from_event(event, produced)
                produced = produced or isinstance(event, TokenEvent)
                yield event
                if isinstance(event, FinishEvent):
                    return
        if not retry:
            return


def _finished(event: FinishEvent, usage: Usage | None = None) -> Finished:
    return Finished(event.finish_reason,
                    usage or Usage(event.num_prompt_tokens, event.num_output_tokens,
                                   event.num_cached_tokens),
                    worker=event.worker_id or "local", ttft_s=event.ttft_s)


async def run_free(engine, prepared: Prepared, call: LocalCall) -> AsyncIterator[ChatEvent]:
    item = WorkItem(prepared.request_id, prepared.tenant, call.prompt_token_ids, call.sampling,
                    call.session)
    parser = ToolCallStreamParser(call.tool_names) if call.tool_names is not None else None
    num_calls = 0

    def convert(pieces) -> list[ChatEvent]:
        nonlocal num_calls
        out: list[ChatEvent] = []
        for piece in pieces:
            if not isinstance(piece, CallPiece):
                out.append(TextDelta(piece.text))
            elif not (call.keep_one_call and num_calls >= 1):
                out.append(ToolCallDelta(num_calls, new_tool_call_id(), piece.call.name, ""))
                out.append(ToolCallDelta(num_calls, None, None, piece.call.arguments))
                num_calls += 1
        return out

    async with contextlib.aclosing(engine_events(engine, item)) as events:
        async for event in events:
            if isinstance(event, TokenEvent):
                if not event.text:
                    continue
                if parser is None:
                    yield TextDelta(event.text)
                    continue
                for out in convert(parser.feed(event.text)):
                    yield out
            else:
                for out in convert(parser.finish() if parser is not None else []):
                    yield out
                yield _finished(event)


async def run_forced(engine, prepared: Prepared, call: LocalCall) -> AsyncIterator[ChatEvent]:
    """The reply is one call: name forced or picked, arguments per `tool_forcing`."""
    forced = call.forced
    tokenizer = engine.tokenizer
    usage = Usage(num_prompt_tokens=len(call.prompt_token_ids))
    first: list[FinishEvent] = []
    max_total = call.sampling.max_tokens

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        ids = call.prompt_token_ids + list(tokenizer.encode(suffix, add_special_tokens=False))
        room = min(max_total - usage.num_completion_tokens,
                   engine.max_context_tokens - len(ids), max_tokens)
        if room <= 0:
            return ""
        sampling = dataclasses.replace(call.sampling, max_tokens=room, stop=stop)
        item = WorkItem(f"{prepared.request_id}-{len(first)}-{usage.num_completion_tokens}",
                        prepared.tenant, ids, sampling, call.session)
        text = ""
        async with contextlib.aclosing(engine_events(engine, item)) as events:
            async for event in events:
                if isinstance(event, TokenEvent):
                    text += event.text
                else:
                    usage.num_completion_tokens += event.num_output_tokens
                    if not first:
                        first.append(event)
                        usage.num_cached_tokens = min(event.num_cached_tokens,
                                                      usage.num_prompt_tokens)
        return text

    names = list(forced.schemas)
    if forced.name is not None:
        name = forced.name
    elif len(names) == 1:
        name = names[0]
    else:
        name = choose_tool_name(await generate(CALL_OPEN, MAX_NAME_TOKENS, ('"',)), names)
    yield ToolCallDelta(0, new_tool_call_id(), name, "")
    arguments = await forced_arguments(forced.schemas.get(name), generate, call_head(name),
                                       max_total)
    yield ToolCallDelta(0, None, None, arguments)
    if first:
        yield _finished(first[0], usage)
    else:
        yield Finished("tool_calls", usage, worker="local")
