"""The keyword arguments of one litellm call for an upstream model, from the client's body.

Invariants:
- only the OpenAI API's own request fields (`OPENAI_FIELDS`) reach litellm as keyword
  arguments; every other field the client sent goes in `extra_body`, which litellm
  forwards to the upstream as sent and never reads. A client can therefore never set one
  of litellm's own parameters (`api_base`, `api_key`, `mock_response`, `custom_llm_provider`,
  logging callbacks, ...): with `api_base` it could have had the gateway's key sent to a
  server of its choosing;
- the fields the gateway owns (`OWNED_FIELDS`) are never the client's: the model, usage
  in streams, `n` (one call per choice), `metadata` (kept here), retries;
- credentials: a model that names its upstream (`api_key_env`, `api_base`, `api_base_env`)
  uses only its own key variable, an explicit placeholder when that is unset, never the
  provider's environment key (`UpstreamModelConfig.litellm_api_key`); only a model with
  none of them leaves litellm its provider-environment behaviour;
- `user` reaches an OpenAI-compatible upstream: litellm drops the keyword argument for
  these providers, so it also goes in `extra_body`;
- a streamed text completion asking for `logprobs` is a 400 naming `logprobs` unless the
  model is a passthrough one: litellm's text-completion stream drops every chunk's
  `logprobs` (its chunks keep only the text, the finish reason and vLLM's ids), and a
  parameter that cannot be honoured is refused, never ignored.
The operator's `litellm_params` are applied over the client's fields (its `extra_body`
over the client's extra fields).
"""
from __future__ import annotations

from gateway.errors import invalid_request
from gateway.model_configs import PASSTHROUGH_PROVIDERS, UpstreamModelConfig

OWNED_FIELDS = frozenset({"model", "stream_options", "n", "metadata", "cache_salt", "num_retries",
                          "max_retries"})
NO_RETRIES = {"num_retries": 0, "max_retries": 0}   # litellm's and the OpenAI SDK's
# the request fields of OpenAI's chat completions, completions and embeddings APIs
OPENAI_FIELDS = frozenset({
    "messages", "prompt", "input", "stream", "audio", "frequency_penalty", "function_call",
    "functions", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "modalities",
    "moderation", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "prompt_cache_options", "prompt_cache_retention", "reasoning_effort", "response_format",
    "safety_identifier", "seed", "service_tier", "stop", "store", "temperature", "tool_choice",
    "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options", "best_of", "echo",
    "suffix", "dimensions", "encoding_format"})


def call_kwargs(config: UpstreamModelConfig, body: dict, stream: bool) -> dict:
    """litellm's keyword arguments for `body` (the client's request, as sent) on `config`'s
    model; a 400 for what litellm would lose (`refuse_lost_fields`)."""
    refuse_lost_fields(config, body, stream)
    fields = {k: v for k, v in body.items() if k not in OWNED_FIELDS and v is not None}
    kwargs = {k: v for k, v in fields.items() if k in OPENAI_FIELDS}
    extra_body = {k: v for k, v in fields.items() if k not in OPENAI_FIELDS}
    if "user" in kwargs and config.litellm_model.partition("/")[0] in PASSTHROUGH_PROVIDERS:
        extra_body["user"] = kwargs["user"]
    kwargs.update(NO_RETRIES)   # an operator may still opt in through litellm_params
    operator = dict(config.litellm_params)
    if isinstance(operator.get("extra_body"), dict):
        extra_body.update(operator.pop("extra_body"))
    kwargs.update(operator)
    if extra_body:
        kwargs["extra_body"] = extra_body
    kwargs["model"] = config.litellm_model
    kwargs["timeout"] = config.timeout_s
    api_base = config.resolved_api_base()
    api_key = config.resolved_api_key() or operator.get("api_key") or config.litellm_api_key()
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key
    if stream:
        kwargs["stream_options"] = {"include_usage": True}
    return kwargs


def refuse_lost_fields(config: UpstreamModelConfig, body: dict, stream: bool) -> None:
    """A 400 `unsupported_parameter` for `logprobs` on a streamed text completion (`body`
    has a `prompt`) through litellm, whose text-completion stream wrapper drops them; a
    passthrough model (gateway/passthrough.py) forwards the upstream's chunks as sent."""
    if stream and not config.passthrough and "prompt" in body and body.get("logprobs") is not None:
        raise invalid_request(
            f"'logprobs' cannot be streamed from the model '{config.name}': its upstream is reached "
            "through litellm, whose streamed text completions carry no log probabilities. Ask without "
            "'stream', or without 'logprobs'.", param="logprobs", code="unsupported_parameter")
