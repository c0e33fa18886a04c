"""LocalBackend checks that need no worker: tool support, reply formats and the context budget.

The engine here is a stand-in record with the attributes `prepare_chat` reads before it
renders anything; generation itself is covered over HTTP with the real tiny model.
"""

import pytest
from shards.protocol import ErrorEvent

from gateway.config import LocalModelConfig
from gateway.errors import ApiError
from gateway.local import LocalBackend
from gateway.engine_streams import error_from_event
from gateway.local_sampling import completion_budget
from gateway.reply_format import reply_schema
from gateway.schemas import ChatCompletionRequest, validate
from tests.gateway.local_stand_ins import EngineFacts, bare_local_backend


def backend(supports_tools: bool) -> LocalBackend:
    return bare_local_backend(EngineFacts(supports_tools))


TOOLS = [{"type": "function", "function": {"name": "f"}}]


async def test_prepare_chat_without_tool_support_is_a_clear_400():
    request = validate(ChatCompletionRequest, {
        "model": "plain", "tools": TOOLS, "messages": [{"role": "user", "content": "x"}]})
    with pytest.raises(ApiError) as caught:
        await backend(False).prepare_chat(request, "t", "r1")
    assert caught.value.status == 400 and caught.value.code == "tools_not_supported"
    assert caught.value.param == "tools"


def _chat(**fields):
    return validate(ChatCompletionRequest, {"model": "plain", **fields})


SAY_JSON = [{"role": "user", "content": [{"type": "text", "text": "Answer as JSON."}]}]


def test_reply_schema_per_response_format():
    object_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    named = {"type": "json_schema", "json_schema": {"name": "n", "schema": object_schema, "strict": True}}
    assert reply_schema(_chat(messages=SAY_JSON)) is None
    assert reply_schema(_chat(messages=SAY_JSON, response_format={"type": "text"})) is None
    assert reply_schema(_chat(messages=SAY_JSON, response_format={"type": "json_object"})) == {"type": "object"}
    assert reply_schema(_chat(messages=[{"role": "user", "content": "x"}], response_format=named)) == object_schema
    no_schema = {"type": "json_schema", "json_schema": {"name": "n"}}
    assert reply_schema(_chat(messages=SAY_JSON, response_format=no_schema)) == {"type": "object"}
    # pydantic's schema of a recursive model: a root `$ref` to an object (QA62: it was a 400)
    recursive = {"$defs": {"E": {"type": "object", "properties": {"kids": {"type": "array",
                                                                           "items": {"$ref": "#/$defs/E"}}}}},
                 "$ref": "#/$defs/E"}
    by_ref = {"type": "json_schema", "json_schema": {"name": "n", "schema": recursive}}
    assert reply_schema(_chat(messages=SAY_JSON, response_format=by_ref)) == recursive


@pytest.mark.parametrize("messages,response_format,param,message", [
    ([{"role": "user", "content": "x"}], {"type": "json_object"}, "messages", "must contain the word 'json'"),
    (SAY_JSON, {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array"}}},
     "response_format.json_schema.schema", "root of the schema must be of type 'object'"),
    (SAY_JSON, {"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "$defs": {"L": {"type": "array"}}, "$ref": "#/$defs/L"}}},
     "response_format.json_schema.schema", "root of the schema must be of type 'object'"),
    (SAY_JSON, {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "objekt"}}},
     "response_format.json_schema.schema", "Invalid JSON Schema"),
])
def test_reply_schema_refuses_what_cannot_be_honoured(messages, response_format, param, message):
    with pytest.raises(ApiError) as caught:
        reply_schema(_chat(messages=messages, response_format=response_format))
    assert (caught.value.status, caught.value.param) == (400, param) and message in caught.value.message


def test_budget_fits_prompt_and_completion_in_the_context():
    assert completion_budget(60, None, 100) == 40
    assert completion_budget(60, 40, 100) == 40
    for num_prompt, num_max in ((60, 41), (100, None), (120, 1)):
        with pytest.raises(ApiError) as caught:
            completion_budget(num_prompt, num_max, 100, param="prompt")
        assert caught.value.code == "context_length_exceeded" and caught.value.param == "prompt"


def test_a_context_length_error_says_what_did_not_fit():
    with pytest.raises(ApiError) as asked:
        completion_budget(60, 41, 100, param="prompt")
    assert asked.value.message == (
        "This model's maximum context length is 100 tokens. However, you requested 101 tokens (60 in the prompt, "
        "41 in the completion). Please reduce the length of the prompt or completion.")
    with pytest.raises(ApiError) as full:   # no max_tokens: a prompt that fills the context leaves no room
        completion_budget(100, None, 100)
    assert full.value.message == (
        "This model's maximum context length is 100 tokens. However, your messages resulted in 100 tokens, which "
        "leaves no room for a completion. Please reduce the length of the messages.")
    with pytest.raises(ApiError) as over:
        completion_budget(120, None, 100)
    assert over.value.message == ("This model's maximum context length is 100 tokens. However, your messages "
                                  "resulted in 120 tokens. Please reduce the length of the messages.")


@pytest.mark.parametrize("event,status,code,retry_after", [
    (ErrorEvent("r", "queue full", "rate_limit_exceeded", True, 2.5), 429,
     "rate_limit_exceeded", "3"),
    (ErrorEvent("r", "all full", "overloaded", True, 1.0), 503, "overloaded", "1"),
    (ErrorEvent("r", "bye", "shutting_down", True), 503, "shutting_down", "1"),
    (ErrorEvent("r", "dup", "invalid_request"), 400, "invalid_request", None),
    (ErrorEvent("r", "died", "worker_died", False), 500, "worker_died", None),
])
def test_error_from_event_maps_engine_codes(event, status, code, retry_after):
    error = error_from_event(event)
    assert (error.status, error.code) == (status, code)
    assert error.headers.get("Retry-After") == retry_after


def test_kv_shares_become_the_predictive_policys_reservations():
    engine = {"policy": "predictive", "num_hot_blocks": 64}
    config = LocalModelConfig(name="m", path="tiny", engine_options=tuple(engine.items()))
    local = LocalBackend(config, tenant_kv_shares={"a": 0.25, "b": 0.0, "c": 0.5})
    options = dict(local.engine.config.policy_options)
    assert dict(options["static_shares"]) == {"a": 0.25, "c": 0.5}
    from cache.policies import make_policy
    policy = make_policy("predictive", **options)  # what a worker builds from the options
    policy._plan.plan(100, {}, 0.0)
    assert policy.reserved_blocks("a") == 25.0 and policy.reserved_blocks("c") == 50.0
    assert policy.reserved_blocks("b") == 0.0


def test_a_local_model_naming_no_policy_runs_the_predictive_one_and_its_kv_shares():
    # the gateway's default, not the engine's: only the gateway makes the forecasts
    config = LocalModelConfig(name="m", path="tiny", engine_options=(("num_hot_blocks", 64),))
    local = LocalBackend(config, tenant_kv_shares={"a": 0.25})
    assert local.engine.config.policy == "predictive"
    assert dict(dict(local.engine.config.policy_options)["static_shares"]) == {"a": 0.25}
    assert "policy predictive" in local.started_line()
    from shards.engine import LocalEngine
    assert LocalEngine("tiny", 1).config.policy == "lru"


def test_kv_shares_under_lru_are_reported_not_applied(caplog):
    config = LocalModelConfig(name="m", path="tiny", engine_options=(("policy", "lru"),))
    with caplog.at_level("WARNING", logger="stepahead.gateway"):
        local = LocalBackend(config, tenant_kv_shares={"a": 0.25})
    assert local.engine.config.policy_options == ()
    assert "kv_share is ignored" in caplog.text


def test_the_started_line_says_where_and_in_what_dtype_the_workers_run():
    engine = {"policy": "predictive", "num_hot_blocks": 64, "dtype": "bfloat16", "threads_per_worker": 2}
    config = LocalModelConfig(name="m", path="tiny", num_workers=3, engine_options=tuple(engine.items()))
    line = LocalBackend(config).started_line()
    assert line == ("model 'm' (tiny): 3 worker(s) of 2 thread(s) on cpu in bfloat16, policy predictive, "
                    "64 hot KV blocks of 16 tokens each, no host tier (--host-blocks, or num_host_blocks under "
                    "[models.engine])")
    engine["num_host_blocks"] = 256
    config = LocalModelConfig(name="m", path="tiny", num_workers=1, engine_options=tuple(engine.items()))
    assert LocalBackend(config).started_line().endswith("16 tokens each, 256 in the host tier")
    engine["prefix_caching"] = False   # QA138: docs/serving.md says the start line says so; it did not
    config = LocalModelConfig(name="m", path="tiny", num_workers=1, engine_options=tuple(engine.items()))
    assert "in bfloat16, prefix caching off, 64 hot KV blocks" in LocalBackend(config).started_line()


def test_a_first_start_of_the_embedded_model_says_it_converts_and_where(tmp_path, monkeypatch):
    import numpy as np
    from safetensors.numpy import save_file

    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path))   # nothing converted there yet
    notice = LocalBackend(LocalModelConfig(name="m", path="smollm2")).conversion_notice()
    assert notice.startswith("first start: converting the embedded SmolLM2 GGUF into ")
    assert str(tmp_path / "models" / "smollm2-135m-instruct") in notice
    converted = tmp_path / "models" / "smollm2-135m-instruct"
    converted.mkdir(parents=True)
    save_file({"w": np.zeros(3, dtype=np.float32)}, str(converted / "model.safetensors"))
    assert LocalBackend(LocalModelConfig(name="m", path="smollm2")).conversion_notice() == (
        f"the converted copy of the embedded model in {converted} is incomplete: converting the SmolLM2 GGUF "
        "again (about 12-15 s on a 2-core machine, longer while it is busy)")   # no tokenizer yet
    (converted / "tokenizer.json").write_text("{}")
    assert LocalBackend(LocalModelConfig(name="m", path="smollm2")).conversion_notice() is None
    assert LocalBackend(LocalModelConfig(name="m", path="tiny")).conversion_notice() is None


async def test_n_choices_prefill_the_prompt_once():
    from gateway.backend import Finished
    from gateway.choices import run_choices, with_choices
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    await local.start()
    try:
        request = _chat(max_tokens=4, messages=[{"role": "user", "content": "word " * 100}])
        prepared = with_choices(await local.prepare_chat(request, "t", "req"), 3)
        finishes = {event.choice: event.usage async for event in run_choices(local, prepared)
                    if isinstance(event, Finished)}
    finally:
        await local.stop()
    assert finishes[0].num_cached_tokens == 0
    block_size = local.engine.config.block_size
    full_blocks = finishes[0].num_prompt_tokens // block_size * block_size
    assert finishes[1].num_cached_tokens >= full_blocks - block_size  # found choice 0's prompt
    assert finishes[2].num_cached_tokens >= full_blocks - block_size


async def test_an_agents_next_step_reuses_the_ids_of_its_last_prompt_and_they_are_the_same():
    from gateway.prompt_token_cache import PromptTokenCache
    from shards.chat_template import render_chat
    from shards.tiny_model import build_tiny_tokenizer

    local = backend(True)
    tokenizer = build_tiny_tokenizer()
    local.engine = EngineFacts(True, max_context_tokens=4096, tokenizer=tokenizer)
    local.prompt_tokens = PromptTokenCache(tokenizer)
    step = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix x.py"}]
    first = await local.prepare_chat(_chat(messages=step, tools=TOOLS), "t", "r1")
    step += [{"role": "assistant", "content": "Reading it.", "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "def f(x): return x * 2"}]
    second = await local.prepare_chat(_chat(messages=step, tools=TOOLS), "t", "r2")
    for prepared, messages in ((first, step[:2]), (second, step)):
        assert list(prepared.prompt_token_ids) == render_chat(tokenizer, messages, TOOLS)
    stats = local.prompt_tokens.stats
    assert stats.num_encoded == 2 and stats.num_spliced == 1
    assert 0 < stats.num_reused_ids < len(second.prompt_token_ids)
    assert local.prompt_token_metrics() == {"num_encoded": 2, "num_spliced": 1, "num_reused_ids": stats.num_reused_ids,
                                            "num_checked": 1, "off": 0}   # /metrics' stepahead_prompt_token_cache_*


async def test_a_text_completion_prompt_is_tokenized_off_the_loop_through_the_prompt_token_cache():
    from gateway.prompt_token_cache import PromptTokenCache
    from gateway.schemas import CompletionRequest
    from shards.tiny_model import build_tiny_tokenizer

    local = backend(False)
    tokenizer = build_tiny_tokenizer()
    local.engine = EngineFacts(False, max_context_tokens=4096, tokenizer=tokenizer)
    local.prompt_tokens = PromptTokenCache(tokenizer)
    first = "<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n"
    second = first + "ls<|im_end|>\n<|im_start|>tool\na.py b.py<|im_end|>\n<|im_start|>assistant\n"
    for text in (first, second):
        request = validate(CompletionRequest, {"model": "plain", "prompt": text, "max_tokens": 4})
        prepared = await local.prepare_completion(request, "t", "r")
        assert list(prepared.prompt_token_ids) == tokenizer.encode(text)
    assert local.prompt_tokens.stats.num_spliced == 1
    batch = validate(CompletionRequest, {"model": "plain", "prompt": [second, first], "max_tokens": 4})
    prepared = await local.prepare_completion(batch, "t", "r")
    assert [list(call.prompt_token_ids) for call in prepared.payload] == [tokenizer.encode(second),
                                                                          tokenizer.encode(first)]
    ids = validate(CompletionRequest, {"model": "plain", "prompt": [65, 66], "max_tokens": 4})
    assert list((await local.prepare_completion(ids, "t", "r")).prompt_token_ids) == [65, 66]


def test_a_worker_lost_or_back_is_logged_under_the_models_name(caplog):
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    with caplog.at_level("WARNING", logger="stepahead.gateway"):
        local.engine.on_worker_event("worker w0 killed by SIGKILL; restarting it in 0.2 s")
    assert caplog.messages == ["stepahead: model 'm': worker w0 killed by SIGKILL; restarting it in 0.2 s"]


async def test_tool_choice_none_renders_the_tools_as_auto_does_and_stops_where_a_call_would_open():
    from gateway.prompt_token_cache import PromptTokenCache
    from gateway.tool_calls import OPEN_TAG
    from shards.chat_template import render_chat
    from shards.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix x.py"}]
    prepared = {}
    for choice in ("auto", "none"):
        local = backend(True)
        local.engine = EngineFacts(True, max_context_tokens=4096, tokenizer=tokenizer)
        local.prompt_tokens = PromptTokenCache(tokenizer)
        prepared[choice] = await local.prepare_chat(_chat(messages=messages, tools=TOOLS, tool_choice=choice), "t", "r")
    # the step's prompt (and so the session's cached prefix) is the one "auto" has, as OpenAI counts it
    assert list(prepared["none"].prompt_token_ids) == list(prepared["auto"].prompt_token_ids) \
        == render_chat(tokenizer, messages, TOOLS)
    assert OPEN_TAG in prepared["none"].payload.sampling.stop and prepared["none"].payload.tool_names is None
    assert OPEN_TAG not in prepared["auto"].payload.sampling.stop and prepared["auto"].payload.tool_names == {"f"}
    # a model whose template cannot render tools answers "none" from the messages alone
    local = backend(False)
    local.engine = EngineFacts(False, max_context_tokens=4096, tokenizer=tokenizer)
    local.prompt_tokens = PromptTokenCache(tokenizer)
    plain = await local.prepare_chat(_chat(messages=messages, tools=TOOLS, tool_choice="none"), "t", "r")
    assert list(plain.prompt_token_ids) == render_chat(tokenizer, messages)
    assert OPEN_TAG not in plain.payload.sampling.stop


async def test_an_assistants_refusal_part_is_rendered_as_the_text_it_said():
    from gateway.prompt_token_cache import PromptTokenCache
    from shards.chat_template import render_chat
    from shards.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    local = backend(True)
    local.engine = EngineFacts(True, max_context_tokens=4096, tokenizer=tokenizer)
    local.prompt_tokens = PromptTokenCache(tokenizer)
    said = [{"role": "user", "content": "Pick a lock."}, {"role": "assistant", "content": "I can't help with that."},
            {"role": "user", "content": "Why?"}]
    refused = [said[0], {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
               said[2]]
    prepared = await local.prepare_chat(_chat(messages=refused), "t", "r")
    assert list(prepared.prompt_token_ids) == render_chat(tokenizer, said)


async def test_a_session_named_in_metadata_reaches_the_engine_namespaced_by_tenant():
    """Untraced (no tracer to bind the session), two tenants naming the same session in
    `metadata` must not share router affinity or pins below the gateway."""
    from gateway.prompt_token_cache import PromptTokenCache
    from gateway.engine_sessions import engine_session_key
    from shards.tiny_model import build_tiny_tokenizer

    local = backend(True)
    tokenizer = build_tiny_tokenizer()
    local.engine = EngineFacts(True, max_context_tokens=4096, tokenizer=tokenizer)
    local.prompt_tokens = PromptTokenCache(tokenizer)
    messages = [{"role": "user", "content": "Fix x.py"}]
    sessions = {}
    for tenant in ("alpha", "beta"):
        prepared = await local.prepare_chat(_chat(messages=messages, metadata={"session_id": "run-1"}), tenant, "r")
        sessions[tenant] = prepared.payload.session
    assert sessions == {"alpha": engine_session_key("alpha", "run-1"), "beta": engine_session_key("beta", "run-1")}
    unnamed = await local.prepare_chat(_chat(messages=messages), "alpha", "r")
    assert unnamed.payload.session is None


def test_a_request_no_worker_took_in_time_is_called_overloaded_not_unavailable():
    """Left in session 53: the 503 of a request queued past `max_queue_wait_s` read "The
    model is unavailable", though every worker was up and busy."""
    overloaded = error_from_event(ErrorEvent("r", "no worker could take the request in time", "overloaded", True))
    assert overloaded.message == "The model is overloaded: no worker could take the request in time"
    stopping = error_from_event(ErrorEvent("r", "the engine is shutting down", "shutting_down", True))
    assert stopping.message == "The model is unavailable: the engine is shutting down"


def test_local_models_share_the_cores_among_all_their_workers(monkeypatch):
    """QA172: each model divided the cores among its own workers only, so a 1-worker model
    beside a 2-worker one ran 4 threads on 2 cores (at a tenth of its speed)."""
    import os

    from gateway.config import parse_config
    from gateway.model_backends import build_backend

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    config = parse_config({
        "models": [{"name": "one", "kind": "local", "path": "tiny", "num_workers": 1},
                   {"name": "two", "kind": "local", "path": "tiny", "num_workers": 2},
                   {"name": "set", "kind": "local", "path": "tiny", "num_workers": 1,
                    "engine": {"threads_per_worker": 4}}],   # set in its table: kept
        "tenants": [{"name": "t", "api_key_sha256": ["0" * 64]}]})
    threads = [build_backend(model, config).engine.config.num_threads for model in config.models]
    assert threads == [2, 2, 4]   # 8 cores among 4 workers: 2 each (not 8 and 4)
    alone = parse_config({"models": [{"name": "one", "kind": "local", "path": "tiny", "num_workers": 2}],
                          "tenants": [{"name": "t", "api_key_sha256": ["0" * 64]}]})
    assert build_backend(alone.models[0], alone).engine.config.num_threads == 4   # one model: 8 cores, 2 workers
