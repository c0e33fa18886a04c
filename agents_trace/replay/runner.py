"""Replaying a trace against a live gateway with real timing.

Sessions are closed loops: a session's first request is due at its trace time (divided
by `speed`); each later step is due once the previous step's response has ended plus
the wait before it (`step_wait_s`, divided by `speed`): the line's `gap_s`, the recorded
tool run or user think time, when it has one, else the whole inter-arrival time
`t - previous t` (which also holds the recorded reply's time, counted again on top of
the live reply's). Requests without a session are open-loop, due at their trace time. At
most `concurrency` requests are in flight at once; a request waiting for a slot is sent
late, and each result says how late (`RequestResult.send_lag_s`: its TTFT and e2e
count from the send, so they leave that wait out). Trace time counts from the first line's `t`, as the simulator's clock
does: a slice from the middle of a trace, or times in epoch seconds, start at once.
A gateway that stops answering mid-replay stops the replay (liveness.py) as Ctrl+C does,
with the outcome saying why.
"""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp

from agents_trace.header_ids import encode_header_id
from agents_trace.replay.chat_cut import cut_messages
from agents_trace.replay.client import RequestResult, stream_request
from agents_trace.replay.liveness import GatewayStopped, GatewayWatch
from agents_trace.replay.model_lookup import check_model, resolve_model
from agents_trace.replay.prompts import PromptBuilder
from cache.trace_format import TraceHeader, TraceRecord, after_tool_names

CLIENT_KEEPALIVE_S = 4.0


def step_wait_s(record: TraceRecord, previous: TraceRecord, speed: float) -> float:
    """How long after the end of `previous`'s response a session's next step, `record`, is
    due: its `gap_s` (the recorded tool run or think time) when the line has one, else the
    recorded inter-arrival `record.t - previous.t`; divided by `speed`, never negative."""
    gap_s = record.gap_s if record.gap_s is not None else record.t - previous.t
    return max(0.0, gap_s) / speed


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to replay. `api_key` (None: not given) is the key of a tenant without one in
    `tenant_keys`; a replay without it needs a key in `tenant_keys` for every tenant of its
    trace (cli.py checks it). The model lookup asks with `lookup_keys`."""

    base_url: str
    api_key: str | None
    tenant_keys: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    speed: float = 1.0
    concurrency: int = 16
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    vocab_size: int = 256
    request_timeout_s: float = 600.0
    progress: bool = True
    step_hints: bool = True
    session_suffix: str = ""   # added to every recorded session id sent (its replay kept apart)

    def key_for(self, tenant: str) -> str:
        return self.tenant_keys.get(tenant, self.api_key)

    def lookup_keys(self, tenants: Iterable[str] = ()) -> tuple[str, ...]:
        """The keys /v1/models is asked with, in this order, each once: `api_key` when given,
        then the keys `tenant_keys` has for `tenants` (the trace's, as they first appear), so
        a `--tenant-keys-file` covering the trace is enough (QA221 F5)."""
        keys = [] if self.api_key is None else [self.api_key]
        keys += [self.tenant_keys[tenant] for tenant in tenants if tenant in self.tenant_keys]
        return tuple(dict.fromkeys(keys))


def group_sessions(records: list[TraceRecord]) -> list[list[tuple[int, TraceRecord]]]:
    """Records, each with its index in `records`, grouped into sessions in order; a record
    without session is its own group."""
    sessions: dict[tuple[str, str], list[tuple[int, TraceRecord]]] = defaultdict(list)
    groups: list[list[tuple[int, TraceRecord]]] = []
    for index, record in enumerate(records):
        if record.session is None:
            groups.append([(index, record)])
            continue
        key = (record.tenant, record.session)
        if key not in sessions:
            groups.append(sessions[key])
        sessions[key].append((index, record))
    return groups


def last_due_s(records: list[TraceRecord]) -> tuple[float, int]:
    """When the replay's last request is due at speed 1, in seconds from its start, were
    every reply instant (so the least time the replay takes; divide by the speed), and
    that request's index: a session's first step is due at its trace time, each later
    step `step_wait_s` after the one before, a line without session at its trace time."""
    trace_start_s = min((record.t for record in records), default=0.0)
    last = (0.0, 0)
    for group in group_sessions(records):
        due_s, previous = 0.0, None
        for index, record in group:
            due_s = record.t - trace_start_s if previous is None else due_s + step_wait_s(record, previous, 1.0)
            last = max(last, (due_s, index))
            previous = record
    return last


def step_hint(record: TraceRecord) -> dict | None:
    """The record's own step for the gateway's tracer (`stepahead_replay`, see
    agents_trace/replay_hints.py): the tools it followed and the tools its response
    called, which the replayed request itself cannot show."""
    after_tools = after_tool_names(record.after)
    hint = {}
    if after_tools:
        hint["after_tools"] = after_tools
    if record.tool_calls:
        hint["tool_calls"] = list(record.tool_calls)
    return hint or None


def sent_as_one_token(records: list[TraceRecord]) -> int:
    """How many lines `_body` sends with a count raised to 1, as a request needs one token
    of each: a token-id prompt of 0 input tokens (prompts.py sends one token) or 0
    output tokens (`max_tokens` 1). A line with `messages` sends them, whatever its count."""
    return sum(1 for r in records if r.output_tokens == 0 or (r.input_tokens == 0 and not r.messages))


def _body(record: TraceRecord, prompts: PromptBuilder, options: ReplayOptions, model: str,
          request_index: int | None = None) -> tuple[str, dict]:
    """The request a line becomes: its `messages` over chat, with its `tools` and
    `tool_choice` (they are part of the prompt the model read), else a token-id prompt of
    its length over completions (`request_index`: the line's place in the trace, which
    a line with neither hash ids nor session draws its tokens from: prompts.py).
    `max_input_tokens` cuts either, keeping the head (chat_cut.py for messages)."""
    max_tokens = max(1, record.output_tokens)
    if options.max_output_tokens is not None:
        max_tokens = min(max_tokens, options.max_output_tokens)
    common = {"model": model, "max_tokens": max_tokens, "temperature": 0.0}
    hint = step_hint(record) if options.step_hints else None
    if hint:
        common["stepahead_replay"] = hint
    if record.service_tier is not None:
        common["service_tier"] = record.service_tier
    if record.messages:
        messages = cut_messages(record.messages, record.tools, record.input_tokens, options.max_input_tokens)
        chat = dict(common, messages=messages)
        if record.tools is not None:
            chat["tools"] = record.tools
        if record.tool_choice is not None:
            chat["tool_choice"] = record.tool_choice
        return "/v1/chat/completions", chat
    return "/v1/completions", dict(common, prompt=prompts.prompt(record, request_index), ignore_eos=True)


@dataclass(slots=True)
class ReplayOutcome:
    """What a replay did: the results of the requests that ended (in the order they
    ended), the wall time, and whether it was interrupted (then requests in flight were
    aborted and are left out, as are those never sent: `len(results) < num_planned`), by
    Ctrl+C or by a gateway that stopped answering (`gateway_stopped`)."""

    results: list[RequestResult]
    wall_s: float
    interrupted: bool
    num_planned: int
    gateway_stopped: str | None = None   # why, when the gateway stopped answering (interrupted too)


async def replay(records: list[TraceRecord], header: TraceHeader, options: ReplayOptions) -> ReplayOutcome:
    """Run the whole trace. Cancelling the task (Ctrl+C under `asyncio.run`) stops it, and
    so does a gateway that stops answering: requests in flight are aborted and the outcome
    holds the requests that ended."""
    prompts = PromptBuilder(header.block_size, options.vocab_size, options.max_input_tokens)
    groups = group_sessions(records)
    # idle connections close after 4 s, before the server closes them: uvicorn's default
    # is 5 s, and a request sent on a connection the server is closing fails with no reply
    connector = aiohttp.TCPConnector(limit=max(options.concurrency, 1) * 2,
                                     keepalive_timeout=CLIENT_KEEPALIVE_S)
    timeout = aiohttp.ClientTimeout(total=options.request_timeout_s, connect=30.0)
    results: list[RequestResult] = []
    progress = None
    if options.progress:
        from tqdm import tqdm

        progress = tqdm(total=len(records), unit="req", desc="replay", leave=False)
    base_url = options.base_url.rstrip("/")
    origin = time.perf_counter()
    interrupted = False
    stopped = None
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as client:
            keys = options.lookup_keys(record.tenant for record in records)
            if options.model:
                await check_model(client, base_url, keys, options.model)
            model = options.model or await resolve_model(client, base_url, keys)
            origin = time.perf_counter()
            watch = GatewayWatch(client, base_url, keys[0] if keys else "")   # any answer counts, a refusal too
            await _run_groups(client, groups, model, prompts, options, base_url, origin, results, progress, watch)
    except asyncio.CancelledError:
        interrupted = True
        asyncio.current_task().uncancel()  # handled here: the caller gets the outcome
    except GatewayStopped as exc:
        interrupted, stopped = True, str(exc)
    finally:
        if progress is not None:
            progress.close()
    return ReplayOutcome(results, time.perf_counter() - origin, interrupted, len(records), stopped)


async def _run_groups(client: aiohttp.ClientSession, groups: list[list[tuple[int, TraceRecord]]], model: str,
                      prompts: PromptBuilder, options: ReplayOptions, base_url: str, origin: float,
                      results: list[RequestResult], progress, watch: GatewayWatch) -> None:
    """Every group's requests, each session's steps in order; appends to `results`.
    GatewayStopped from `watch` aborts the other groups and propagates."""
    gate = asyncio.Semaphore(max(1, options.concurrency))
    trace_start_s = min((group[0][1].t for group in groups), default=0.0)

    async def run_group(group: list[tuple[int, TraceRecord]]) -> None:
        due = origin + (group[0][1].t - trace_start_s) / options.speed   # when the next request is due
        previous: TraceRecord | None = None
        ended = origin   # when the previous step's response ended
        for step_index, (request_index, record) in enumerate(group):
            if previous is not None:
                due = ended + step_wait_s(record, previous, options.speed)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            path, body = _body(record, prompts, options, model, request_index)
            headers = {"Authorization": f"Bearer {options.key_for(record.tenant)}"}
            if record.session is not None:   # encoded as the gateway's answers are: any id, exactly
                headers["x-session-id"] = encode_header_id(record.session + options.session_suffix)
            async with gate:
                await watch.before_send()   # none sent while the gateway is probed (liveness.py)
                started = time.perf_counter()
                result = RequestResult(record.tenant, record.session, step_index, started - origin,
                                       service_tier=record.service_tier, send_lag_s=max(0.0, started - due))
                results.append(await stream_request(client, base_url + path, body, headers, result, started))
                ended = time.perf_counter()
            if progress is not None:
                progress.update(1)
            if result.connection_failed:
                await watch.note_connection_error(result.error)
            elif result.answered:
                watch.note_answer()
            previous = record

    tasks = [asyncio.ensure_future(run_group(g)) for g in groups]
    try:
        await asyncio.gather(*tasks)
    except GatewayStopped:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        watch.close()
