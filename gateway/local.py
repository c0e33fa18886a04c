"""Models served by stepahead's own workers (`shards.engine.LocalEngine`).

Invariants:
- the prompt is rendered with the model's chat template (tools included) and checked
  against the context length before admission: prompt + completion budget must fit; a
  prompt whose length alone proves it past the context is refused before it is tokenized
  (gateway/prompt_bounds.py), with the same 400;
- the tenant from the API key, never a client field, goes into every `WorkItem`;
- tool calls in the output are parsed (`tool_calls.py`) into `ToolCallDelta`s only when
  the request offered tools; "required"/named `tool_choice` take the forced path
  (`tool_forcing.py`) so the reply is always a call; with "none" the tools are still
  rendered (the prompt, and so the cached prefix, is the one "auto" has) and the reply
  stops where a call would open, so it is never one;
- closing `run()` closes the engine stream, which cancels the request on its worker;
- tenant weights from the config reach the engine's fair queue, and tenants' `kv_share`s
  the predictive policy's reservations, at the start and at a reload (`tenant_shares.py`);
- a model whose engine options name no policy runs `DEFAULT_LOCAL_POLICY` (predictive);
- a request that sets no `max_tokens` of a tenant with a `token_budget` runs at most its
  share of what the budget has left after its prompts (`tenant_budget_room`): each of its
  runs (prompts x n or best_of) is capped at an equal share and reserves it, so the budget
  holds as for a request with `max_tokens` (a run that reaches it finishes `length`); a
  tenant without a budget reserves `default_completion_reserve_tokens` and runs to the
  context's end.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
from collections.abc import AsyncIterator, Callable

from gateway.backend import ChatEvent, Prepared
from gateway.budget_share import run_share
from gateway.config import LocalModelConfig
from gateway.engine_sessions import engine_session_key
from gateway.errors import invalid_request
from gateway.local_completions import LocalCompletions
from gateway.local_generation import ForcedCall, LocalCall, run_forced, run_free, run_structured
from gateway.chat_checks import refuse_unsteerable_strict
from gateway.local_refusals import refuse_unsupported_chat_params, template_messages
from gateway.local_schemas import local_schema
from gateway.local_sampling import completion_budget, sampling_params
from gateway.model_backends import engine_options_run
from gateway.prompt_count import chat_tools, count_prompt_tokens
from gateway.prompt_token_cache import PromptTokenCache
from gateway.reply_format import reply_schema
from gateway.schema_checks import SchemaChecker, check_off_loop, format_schema
from gateway.schemas import ChatCompletionRequest, CompletionRequest, NamedToolChoice
from gateway.tenant_shares import apply_tenant_shares, log_notes, with_tenant_shares
from gateway.tool_calls import OPEN_TAG

log = logging.getLogger("stepahead.gateway")

STATS_REFRESH_INTERVAL_S = 2.0
# the embedded model's conversion, measured (docs/serving.md): 12.4-14.7 s idle, 26 s busy
CONVERSION_TIME = "about 12-15 s on a 2-core machine, longer while it is busy"


class LocalBackend(LocalCompletions):
    __slots__ = ("config", "model_id", "owned_by", "engine", "default_completion_reserve_tokens",
                 "schemas", "prompt_tokens", "_stats_task", "_fixed_by_engine_options", "tenant_budget_room")

    def __init__(self, config: LocalModelConfig, *, num_local_workers: int | None = None,
                 default_completion_reserve_tokens: int = 256,
                 tenant_weights: dict[str, float] | None = None,
                 tenant_kv_shares: dict[str, float] | None = None,
                 tenant_budget_room: Callable[[str], int | None] | None = None) -> None:
        from shards.engine import LocalEngine
        self.config = config
        self.model_id = config.name
        self.owned_by = "stepahead"
        self.default_completion_reserve_tokens = default_completion_reserve_tokens
        # what a tenant's request may reserve when it sets no max_tokens (`Limiters.budget_room`)
        self.tenant_budget_room = tenant_budget_room
        # a bad [models.engine] option is one clear error; the cores shared with the other local models' workers
        options = engine_options_run(config, num_local_workers)
        self._fixed_by_engine_options, notes = with_tenant_shares(options, tenant_weights or {},
                                                                  tenant_kv_shares or {}, config.name)
        log_notes(notes)
        self.engine = LocalEngine(config.path, config.num_workers, **options)
        self.engine.on_worker_event = self._worker_event
        self.engine.on_start_progress = self._start_progress
        self.schemas = SchemaChecker()   # response_format schemas that passed, per tenant
        self.prompt_tokens: PromptTokenCache | None = None   # once started (it needs the tokenizer)
        self._stats_task: asyncio.Task | None = None

    async def start(self) -> None:
        notice = self.conversion_notice()
        if notice:
            print(f"stepahead: {notice}", file=sys.stderr, flush=True)
        await self.engine.start()
        self.prompt_tokens = PromptTokenCache(self.engine.tokenizer)
        print(f"stepahead: {self.started_line()}", file=sys.stderr, flush=True)  # stdout may be JSON
        self._stats_task = asyncio.create_task(self._refresh_stats())

    def cancel_start(self) -> None:
        self.engine.cancel_start()

    def _start_progress(self, line: str) -> None:
        """What the start is doing (shards/worker_events.py), under the model's name."""
        print(f"stepahead: model {self.model_id!r}: {line}", file=sys.stderr, flush=True)   # stdout may be JSON

    def _worker_event(self, line: str) -> None:
        """A worker lost or back after the start (shards/worker_events.py), in the log
        under the model's name in this gateway."""
        log.warning("stepahead: model %r: %s", self.model_id, line)

    def set_tenant_shares(self, weights: dict[str, float], kv_shares: dict[str, float],
                          changed: tuple[str, ...] = ("weight", "kv_share")) -> list[str]:
        """Put reloaded tenants' `weight`s and `kv_share`s in force (gateway/tenant_shares.py);
        the lines to log about what was not applied."""
        return apply_tenant_shares(self.engine, self.model_id, self._fixed_by_engine_options, weights,
                                   kv_shares, changed)

    def conversion_notice(self) -> str | None:
        """What the operator is told before a start that first converts the embedded
        model (the wait is long and would otherwise pass in silence); None otherwise."""
        from shards.model_files import EMBEDDED_MODEL, model_dir, needs_conversion

        if not needs_conversion(self.engine.config.model):
            return None
        target = model_dir(EMBEDDED_MODEL)
        if target.exists():   # converted before, since damaged or cut short
            return (f"the converted copy of the embedded model in {target} is incomplete: converting "
                    f"the SmolLM2 GGUF again ({CONVERSION_TIME})")
        return (f"first start: converting the embedded SmolLM2 GGUF into {target} "
                f"(once; {CONVERSION_TIME})")

    def started_line(self) -> str:
        """What the operator is told once the workers are up: where and how they run."""
        cfg, dtype = self.engine.config, self.engine.health()["dtype"]
        caching = f"policy {cfg.policy}" if cfg.prefix_caching else "prefix caching off"   # (as docs/serving.md says)
        threads = f" of {cfg.num_threads} thread(s)" if cfg.device == "cpu" else ""
        return (f"model {self.model_id!r} ({self.engine.model_id}): {self.engine.num_workers} worker(s){threads} "
                f"on {cfg.device} in {dtype}, {caching}, {cfg.num_hot_blocks} hot KV blocks "
                f"of {cfg.block_size} tokens each, "   # no host tier: what sets one, without and with --config
                + (f"{cfg.num_host_blocks} in the host tier" if cfg.num_host_blocks
                   else "no host tier (--host-blocks, or num_host_blocks under [models.engine])"))

    async def stop(self) -> None:
        if self._stats_task is not None:
            self._stats_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stats_task
        await self.engine.stop()

    async def _refresh_stats(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.engine.refresh_stats()
            await asyncio.sleep(STATS_REFRESH_INTERVAL_S)

    def health(self) -> dict:
        health = self.engine.health()
        workers = health.get("workers", {})
        ready = bool(workers) and any(w.get("alive") and w.get("ready") for w in workers.values())
        prompt_tokens = dataclasses.asdict(self.prompt_tokens.stats) if self.prompt_tokens is not None else None
        return {"model": self.model_id, "kind": "local", "engine_model": self.engine.model_id,
                "ready": ready, **health, "prompt_tokens": prompt_tokens}

    def worker_metrics(self) -> list[dict]:
        return self.engine.metrics()

    def router_metrics(self) -> dict:
        return self.engine.router_stats()

    def prompt_token_metrics(self) -> dict:
        if self.prompt_tokens is None:
            return {}
        stats = dataclasses.asdict(self.prompt_tokens.stats)
        stats["off"] = int(stats.pop("disabled") is not None)
        return stats

    # --- preparation ---------------------------------------------------------------
    def _prepared(self, request_id: str, tenant: str, num_max_tokens: int | None,
                  call: LocalCall) -> Prepared:
        num_prompt = len(call.prompt_token_ids)
        reserve = num_max_tokens or min(call.sampling.max_tokens,
                                        self.default_completion_reserve_tokens)
        return Prepared(request_id=request_id, tenant=tenant, model=self.model_id,
                        num_prompt_tokens=num_prompt, num_reserved_tokens=num_prompt + reserve,
                        payload=call, prompt_token_ids=call.prompt_token_ids,
                        service_tier="flex" if call.flex else "default")

    def _within_budget(self, prepared: Prepared, num_runs: int) -> Prepared:
        """`prepared`, a request that set no `max_tokens` running `num_runs` times, with
        each run capped at an equal share of what its tenant's budget has left after the
        prompts (at least 1: a request that cannot fit is then refused by the budget at
        admission), and that share reserved; as it was for a tenant without a budget."""
        budget_room = getattr(self, "tenant_budget_room", None)   # NOTE: a test's bare backend has none
        room = None if budget_room is None else budget_room(prepared.tenant)
        if room is None:
            return prepared
        share = run_share(room, prepared.num_prompt_tokens, num_runs)   # each prompt paid once: one prefill
        calls = prepared.payload if prepared.num_prompts > 1 else [prepared.payload]
        calls = [dataclasses.replace(call, sampling=dataclasses.replace(
            call.sampling, max_tokens=min(call.sampling.max_tokens, share))) for call in calls]
        return dataclasses.replace(prepared, payload=calls if prepared.num_prompts > 1 else calls[0],
                                   num_reserved_tokens=prepared.num_prompt_tokens
                                   + max(call.sampling.max_tokens for call in calls))

    async def prepare_completion(self, request: CompletionRequest, tenant: str, request_id: str) -> Prepared:
        prepared = await super().prepare_completion(request, tenant, request_id)
        if request.max_tokens is not None:
            return prepared
        return self._within_budget(prepared, prepared.num_prompts * max(request.n or 1, prepared.best_of))

    async def prepare_chat(self, request: ChatCompletionRequest, tenant: str,
                           request_id: str) -> Prepared:
        from shards.chat_template import render_chat_prompt
        if request.top_logprobs is not None and not request.logprobs:
            raise invalid_request("top_logprobs needs logprobs to be true.", param="top_logprobs")
        refuse_unsupported_chat_params(request)
        response_schema = await check_off_loop(self.schemas, tenant, format_schema(request),
                                               reply_schema, request, tenant, self.schemas)
        refuse_unsteerable_strict(request)   # after the schemas were found valid
        messages = template_messages(request)
        use_tools = bool(request.tools) and request.tool_choice != "none"
        # NOTE: with tool_choice "none" the tools stay in the prompt (as OpenAI counts them), so the
        # step reuses the session's cached prefix; the reply stops where a call would begin
        show_tools = use_tools or (bool(request.tools) and self.engine.supports_tools)
        if use_tools and not self.engine.supports_tools:
            raise invalid_request(f"The model '{self.model_id}' does not support tools: its chat "
                                  "template cannot render them.", param="tools",
                                  code="tools_not_supported")
        if request.logprobs and (use_tools or response_schema is not None):
            raise invalid_request("logprobs with tools or a JSON response_format are not supported by "
                                  "local models: the gateway writes part of such replies itself.",
                                  param="logprobs", code="unsupported_parameter")
        tools = chat_tools(request, self.engine.supports_tools)   # (those of `show_tools`)
        if response_schema is not None:
            response_schema = local_schema(response_schema, "response_format.json_schema.schema")
        tokenizer = self.engine.tokenizer
        budget_param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"

        def render_and_encode() -> tuple[list[int] | None, Exception | None]:
            try:
                prompt = render_chat_prompt(tokenizer, messages, tools)
            except Exception as exc:   # template errors are about the messages sent
                return None, exc
            # NOTE: rendering is cheap (~15 ns a character); tokenizing megabytes costs seconds and
            # gigabytes, so a prompt certainly past the context is refused before (QA134 H0)
            self.prompt_tokens.bound.refuse_past_context(prompt, request.completion_limit(),
                                                         self.engine.max_context_tokens, marked=True,
                                                         budget_param=budget_param)
            # an agent's step repeats the last one's prompt: its ids are reused up to the
            # last special token the two share (gateway/prompt_token_cache.py); the special
            # tokens the client's text spells are text (shards/special_text.py)
            return self.prompt_tokens.encode(tenant, prompt, marked=True), None

        prompt_ids, render_error = await asyncio.to_thread(render_and_encode)
        if render_error is not None:
            raise invalid_request(f"The messages cannot be rendered with this model's chat "
                                  f"template: {render_error}", param="messages")
        budget = completion_budget(len(prompt_ids), request.completion_limit(), self.engine.max_context_tokens,
                                   budget_param=budget_param)
        keep_one_call = use_tools and request.parallel_tool_calls is False
        # NOTE: with parallel_tool_calls=false, stopping at the first call's end saves work.
        stop = request.stop_list() + (["</tool_call>"] if keep_one_call else []) \
            + ([OPEN_TAG] if show_tools and not use_tools else [])
        forced = None
        tool_schemas = {tool.function.name: None if tool.function.parameters is None else local_schema(
            tool.function.parameters, f"tools[{index}].function.parameters", "invalid_function_parameters")
            for index, tool in enumerate(request.tools)} if use_tools else None
        if use_tools and request.forces_call():
            named = (request.tool_choice.function.name
                     if isinstance(request.tool_choice, NamedToolChoice) else None)
            forced = ForcedCall(schemas=tool_schemas, name=named)
        metadata = request.metadata or {}
        client_session = metadata.get("session_id") or metadata.get("session")
        call = LocalCall(
            prompt_token_ids=prompt_ids,
            sampling=sampling_params(request, self.engine.tokenizer, max_tokens=budget, stop=stop,
                                     logprobs=(request.top_logprobs or 0) if request.logprobs else None),
            session=None if client_session is None else engine_session_key(tenant, client_session),
            tool_names=frozenset(t.function.name for t in request.tools) if use_tools else None,
            forced=forced, keep_one_call=keep_one_call, response_schema=response_schema,
            tool_schemas=tool_schemas, flex=request.service_tier == "flex")
        prepared = self._prepared(request_id, tenant, request.completion_limit(), call)
        return prepared if request.completion_limit() is not None else self._within_budget(prepared, request.n or 1)

    async def count_chat_prompt(self, request: ChatCompletionRequest) -> int | None:
        """The tokens of the prompt `prepare_chat` renders for `request`, counted however far
        past the context (a prompt it refused untokenized, for POST /v1/responses/input_tokens);
        None past `MAX_COUNTED_CHARS` characters (gateway/prompt_count.py)."""
        return await count_prompt_tokens(self.engine.tokenizer, template_messages(request),
                                         chat_tools(request, self.engine.supports_tools),
                                         self.prompt_tokens.marked_encoder if self.prompt_tokens else None)

    # --- running -----------------------------------------------------------------
    async def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        call: LocalCall = prepared.payload
        candidate = prepared.choice
        if prepared.num_prompts > 1:  # one call per prompt, its choices in a group
            call = prepared.payload[prepared.choice // prepared.num_per_prompt]
            candidate = prepared.choice % prepared.num_per_prompt
        seed = call.sampling.seed
        if candidate and seed is not None:  # seeded choices of one prompt differ
            call = dataclasses.replace(call, sampling=dataclasses.replace(call.sampling, seed=seed + candidate))
        if call.forced is not None:
            events = run_forced(self.engine, prepared, call)
        elif call.response_schema is not None:
            events = run_structured(self.engine, prepared, call)
        else:
            events = run_free(self.engine, prepared, call)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

