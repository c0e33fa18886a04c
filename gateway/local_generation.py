"""Driving a local engine for one request: free generation, and forced tool calls.

Invariants (the engine's streams and errors: gateway/engine_streams.py): usage counts
every token the workers sent for the request, across the several short generations of a
forced tool call (one stopped early counts what it sent); a free reply cut midway (its
client gone) also counts, in `GeneratedTokens.num_sent`, the tokens its engine stream
still held unread (`LocalEngine.num_generated`, asked before the stream closes); a forced
call never exceeds the request's `max_tokens` in total; a forced or structured reply
abandoned midway stops every generation it was reading (`Continuations.close`); a reply
its client read too slowly fails as one whose client left (499: gateway/engine_streams.py's
`read_too_slowly`); a schema too large to write
(`json_smallest.SchemaTooLarge`) is a 400 naming the parameter it came from.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from shards.protocol import FinishEvent, TokenEvent, TokenLogprob, WorkItem

from gateway.backend import ChatEvent, Finished, Prepared, TextDelta, TokenChoice, ToolCallDelta, Usage
from gateway.engine_streams import Continuations, engine_events
from gateway.choices import queue_room
from gateway.collected import reply_finish_reason
from gateway.ids import new_tool_call_id
from gateway.token_text import token_choices
from gateway.tool_calls import CallPiece, ToolCallStreamParser
from gateway.json_smallest import SchemaTooLarge
from gateway.json_or_calls import json_or_tool_calls
from gateway.tool_forcing import (CALL_OPEN, call_head, choose_tool_name, cut_at_stops, forced_arguments,
                                  forced_json, held_to_schema)
from gateway.worker_runs import WorkerRuns

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
    response_schema: dict | None = None  # the reply's text must be JSON valid against it
    tool_schemas: dict[str, dict | None] | None = None  # each offered tool's parameters (None: any object)
    echo_text: str | None = None  # completions' `echo`: the prompt, sent before the completion
    # completions' `echo` with `max_tokens` 0: the prompt alone. The engine runs it for one
    # token (its prompt's logprobs come with the first), which is dropped: the reply's text
    # is the echo, it finishes "length" and its usage counts no completion token.
    echo_only: bool = False
    flex: bool = False  # `service_tier: "flex"`: the engine serves it after the default tier (`WorkItem.flex`)


def schema_param(call: LocalCall, schema: dict | None) -> str | None:
    """The request parameter `schema` came from: the reply's `response_format`, or the
    parameters of the tool at its index in `tools` (Responses requests rename them)."""
    if schema is not None and schema is call.response_schema:
        return "response_format.json_schema.schema"
    for index, tool_schema in enumerate((call.tool_schemas or {}).values()):
        if schema is not None and schema is tool_schema:
            return f"tools[{index}].function.parameters"
    return None


def _num_sent(engine, request_id: str, num_read: int) -> int:
    """The tokens the engine queued for a run, read or not (`LocalEngine.num_generated`,
    asked while its stream is open); `num_read` where it has no count (a stream that ended
    was read to its end)."""
    num_generated = getattr(engine, "num_generated", None)
    num_sent = num_generated(request_id) if num_generated is not None else None
    return max(num_read, num_sent or 0)


def _finished(event: FinishEvent, finish_reason: str | None = None, block_size: int = 1,
              runs: WorkerRuns | None = None, first_ttft_s: float | None = None) -> Finished:
    """The reply's end, its usage the engine request's: the prompt's full blocks its worker
    wrote to the prefix cache, at most those it did not find there (a run resumed on another
    worker wrote blocks the first had found: they are not counted), never a partial block.
    A run resumed mid-stream on another worker (`runs` of several) names its first worker,
    which prefilled the prompt, found its cached tokens (the finish counts the first's) and
    sent the first token (its TTFT `first_ttft_s`, as read here), not the one that finished."""
    num_unfound = max(0, event.num_prompt_tokens // block_size * block_size - event.num_cached_tokens)
    num_written = min(event.num_cache_write_tokens, num_unfound) // block_size * block_size
    resumed = runs is not None and len(runs.runs) > 1
    return Finished(finish_reason or event.finish_reason,
                    Usage(event.num_prompt_tokens, event.num_output_tokens, event.num_cached_tokens,
                          num_cache_write_tokens=num_written),
                    worker=(runs.first_worker if resumed else event.worker_id) or "local",
                    ttft_s=first_ttft_s if resumed and first_ttft_s is not None else event.ttft_s,
                    worker_runs=runs.resumed(event.num_output_tokens) if resumed else ())


def _cut_short(call: LocalCall, num_completion_tokens: int,
               first: tuple[str, int | None, float] | None) -> Finished:
    """How a reply stopped before its engine request finished ends: "length", with the
    worker, cached tokens and TTFT of the request's first event."""
    worker, num_cached, ttft_s = first or ("local", 0, None)
    num_prompt = len(call.prompt_token_ids)
    return Finished("length", Usage(num_prompt, num_completion_tokens, min(num_cached or 0, num_prompt)),
                    worker=worker, ttft_s=ttft_s)


async def run_free(engine, prepared: Prepared, call: LocalCall) -> AsyncIterator[ChatEvent]:
    """The model's reply as it streams; it finishes as "tool_calls" when it made any and
    did not run out of tokens (`reply_finish_reason`). A call whose arguments fail its
    tool's schema is repaired (`tool_forcing.held_to_schema`) within what is left of
    `max_tokens` when the call is read; usage counts those generations too, and once the
    reply and its repairs have used `max_tokens` the reply stops there ("length")."""
    item = WorkItem(prepared.request_id, prepared.tenant, call.prompt_token_ids, call.sampling,
                    call.session, flex=call.flex, queue_room=queue_room(prepared))
    parser = ToolCallStreamParser(call.tool_names) if call.tool_names is not None else None
    num_calls, num_tokens = 0, 0
    repairs: Continuations | None = None
    started_s, first = time.perf_counter(), None   # the first event's (worker, cached tokens, TTFT)
    runs = WorkerRuns()   # the workers it ran on (several once resumed mid-stream), what each generated
    prepared.generated.follow(runs)   # (for a reply cut short: its metrics credit each worker too)

    async def checked(name: str, arguments: str) -> str:
        nonlocal repairs
        if repairs is None:
            repairs = Continuations(engine, prepared, call)
        repairs.max_total = max(0, call.sampling.max_tokens - num_tokens)   # it takes off its own usage
        return await held_to_schema((call.tool_schemas or {}).get(name), arguments, name, repairs,
                                    repairs.max_total)

    async def convert(pieces) -> list[ChatEvent]:
        nonlocal num_calls
        out: list[ChatEvent] = []
        for piece in pieces:
            if not isinstance(piece, CallPiece):
                out.append(TextDelta(piece.text))
            elif not (call.keep_one_call and num_calls >= 1):
                arguments = await checked(piece.call.name, piece.call.arguments)
                out.append(ToolCallDelta(num_calls, new_tool_call_id(), piece.call.name, ""))
                out.append(ToolCallDelta(num_calls, None, None, arguments))
                num_calls += 1
        return out

    scored: list[TokenChoice] = []  # log probabilities of tokens whose text is still held back
    scored_sent = False   # a delta carried log probabilities: the reply has its (maybe empty) list
    echo_text = call.echo_text
    events = engine_events(engine, item)
    try:
        async for event in events:
            if echo_text is not None:  # with the first real event, so TTFT stays true
                prompt_scores = event.prompt_logprobs if isinstance(event, TokenEvent) else None
                echoed = prompt_choices(engine.tokenizer, call.prompt_token_ids, prompt_scores)
                scored_sent = echoed is not None
                yield TextDelta(echo_text, echoed)
                echo_text = None
            if isinstance(event, TokenEvent):
                num_tokens += len(event.token_ids)
                runs.on_tokens(event.worker_id, len(event.token_ids))
                if first is None and event.worker_id is not None:
                    first = (event.worker_id, event.num_cached_tokens, time.perf_counter() - started_s)
                    prepared.generated.run_started(   # for a reply cut before its end
                        event.worker_id, min(event.num_cached_tokens or 0, len(call.prompt_token_ids)),
                        is_prompt_head=prepared.is_prompt_head)
                if call.echo_only:   # the engine's one token: none of the reply's
                    continue
                if event.logprobs:
                    scored.extend(token_choices(engine.tokenizer, event.logprobs, generated=True))
                if not event.text:
                    continue
                if parser is None:
                    scored_sent = scored_sent or bool(scored)
                    yield TextDelta(event.text, scored or None)
                    scored = []
                    continue
                for out in await convert(parser.feed(event.text)):
                    yield out
                spent = num_tokens + (repairs.usage.num_completion_tokens if repairs is not None else 0)
                if repairs is not None and spent >= call.sampling.max_tokens:
                    for out in await convert(parser.finish()):   # the budget is spent: the reply ends here
                        yield out
                    yield _cut_short(call, spent, first)
                    return
            else:
                for out in await convert(parser.finish() if parser is not None else []):
                    yield out
                # asked for log probabilities, a reply with no token of text gets an empty list, not none
                if parser is None and (scored or (call.sampling.logprobs is not None and not scored_sent)):
                    yield TextDelta("", scored)
                finished = _finished(event, "length" if call.echo_only
                                     else reply_finish_reason(event.finish_reason, num_calls > 0),
                                     getattr(getattr(engine, "config", None), "block_size", 1),
                                     runs, first[2] if first is not None else None)
                if call.echo_only:
                    finished.usage.num_completion_tokens = 0
                if repairs is not None:
                    finished.usage.num_completion_tokens += repairs.usage.num_completion_tokens
                yield finished
    except SchemaTooLarge as error:   # named for the parameter its schema came from
        raise error.named(schema_param(call, error.schema)) from None
    finally:
        num_sent = _num_sent(engine, item.request_id, num_tokens)   # before the close: the engine forgets it
        await events.aclose()
        if repairs is not None:
            await repairs.close()
        num_repairs = repairs.usage.num_completion_tokens if repairs is not None else 0
        prepared.generated.num += num_tokens + num_repairs
        prepared.generated.num_sent += num_sent + num_repairs


def prompt_choices(tokenizer, prompt_ids: list[int], scores: list[TokenLogprob] | None) -> list[TokenChoice] | None:
    """The prompt's tokens as `logprobs` entries (completions' `echo` with `logprobs`):
    the first has no log probability (nothing comes before it), the others the worker's
    scores; None when the worker sent none."""
    if scores is None:
        return None
    choices = token_choices(tokenizer, [TokenLogprob(prompt_ids[0], 0.0), *scores])
    choices[0] = dataclasses.replace(choices[0], logprob=None)
    return choices


async def run_forced(engine, prepared: Prepared, call: LocalCall) -> AsyncIterator[ChatEvent]:
    """The reply is one call: name forced or picked, arguments per `tool_forcing`. The
    call's head goes out with the first arguments the model decided, not before: a name
    the gateway knows without the model is no first token (TTFT stays the model's). It
    finishes "tool_calls", even where `max_tokens` ran out: its arguments are always whole
    and valid, so `stop` does not cut them (a call an agent runs is never cut JSON; the
    finish reason of a reply with calls could not say it was: QA223 F1)."""
    forced = call.forced
    generate = Continuations(engine, prepared, call, queue_room(prepared))
    names = list(forced.schemas)
    try:
        if forced.name is not None:
            name = forced.name
        elif len(names) == 1:
            name = names[0]
        else:
            name = choose_tool_name(await generate(CALL_OPEN, MAX_NAME_TOKENS, ('"',)), names)
        head: ToolCallDelta | None = ToolCallDelta(0, new_tool_call_id(), name, "")
        async for arguments in forced_arguments(forced.schemas.get(name), generate, call_head(name),
                                                generate.max_total, generate.stream, generate.can_ask):
            if head is not None:
                yield head
                head = None
            yield ToolCallDelta(0, None, None, arguments)
        if head is not None:
            yield head
        yield generate.finished("tool_calls")
    except SchemaTooLarge as error:   # named for the parameter its schema came from
        raise error.named(schema_param(call, error.schema)) from None
    finally:
        await generate.close()
        prepared.generated.num += generate.usage.num_completion_tokens
        prepared.generated.num_sent += generate.usage.num_completion_tokens


async def run_structured(engine, prepared: Prepared, call: LocalCall) -> AsyncIterator[ChatEvent]:
    """The reply's text is one JSON object that validates against `call.response_schema`
    (`response_format` json_object / json_schema), sent as it is decided (`tool_forcing`);
    with tools offered, the model may call them instead (`json_or_calls`). A JSON reply
    finishes "stop": it is whole and valid even where the budget ran out (leaves the model
    had no tokens left for take their schema's fallback values), so clients may parse it;
    a stop string (`stop`) ends it before it, finishing "stop" too (its JSON then cut, as
    OpenAI's: `tool_forcing.cut_at_stops`)."""
    generate = Continuations(engine, prepared, call, queue_room(prepared))
    try:
        if call.tool_names is not None:
            async for event in json_or_tool_calls(call.response_schema, call.tool_names, call.keep_one_call,
                                                  call.sampling.stop, generate, call.tool_schemas):
                yield event
            return
        async for text in cut_at_stops(forced_json(call.response_schema, generate, generate.max_total,
                                                   generate.stream, generate.can_ask), call.sampling.stop):
            yield TextDelta(text)
        yield generate.finished("stop")
    except SchemaTooLarge as error:   # named for the parameter its schema came from
        raise error.named(schema_param(call, error.schema)) from None
    finally:
        await generate.close()
        prepared.generated.num += generate.usage.num_completion_tokens
        prepared.generated.num_sent += generate.usage.num_completion_tokens
