"""The `[[models]]` tables of the gateway's config: local models (served by local
workers), upstream models (through litellm, or passed through), embedding models.

Invariants: every record is frozen; a table's unknown keys, missing names and bad kinds,
a local model's engine tables of the wrong shape (`check_engine_tables`), and an upstream
`litellm_model` whose provider litellm does not know or that names no model
(`check_litellm_model`), are a ConfigError naming `models[i]`; secrets are never held,
only the names of the environment variables that hold them (read per request); a model
whose `api_base_env` is unset never goes to the provider's default endpoint
(`resolved_api_base`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from gateway.config_values import ConfigError, check_toml_ints, key_setting, positive, reject_unknown_keys, take
from gateway.embedding_model import EmbeddingModelConfig, embedding_model_config
from gateway.errors import ApiError
from shards.engine_options import EngineOptionError, check_engine_tables

DEFAULT_LOCAL_MODEL = "smollm2"
PASSTHROUGH_PROVIDERS = ("openai", "hosted_vllm", "openai_like", "custom_openai")
# the key litellm gets for a model that names its upstream but has no key: an explicit one,
# so that litellm does not substitute the provider's environment key (OPENAI_API_KEY)
NO_API_KEY = "no-key-configured"
LOCAL_MODEL_KEYS = ("name", "kind", "path", "num_workers", "engine")
UPSTREAM_MODEL_KEYS = ("name", "kind", "litellm_model", "passthrough", "api_base", "api_base_env",
                       "api_key_env", "timeout_s", "max_context_tokens", "litellm_params")


@dataclass(frozen=True, slots=True)
class LocalModelConfig:
    """A model served by local workers. `path` is the embedded default name ("smollm2"),
    the offline test model ("tiny") or a local Hugging Face directory."""

    name: str
    path: str = DEFAULT_LOCAL_MODEL
    num_workers: int = 2
    engine_options: tuple[tuple[str, Any], ...] = ()
    kind: Literal["local"] = "local"


@dataclass(frozen=True, slots=True)
class UpstreamModelConfig:
    """A model reached through litellm. `api_key_env`/`api_base_env` name environment
    variables read per request, so secrets never sit in the config file.
    `litellm_params` are extra keyword arguments for every `litellm.acompletion` call
    (e.g. `num_retries`, or `mock_response` for an offline demo). `passthrough` sends
    requests to an OpenAI-compatible `api_base` directly, without litellm (much less
    overhead; `passthrough.py`)."""

    name: str
    litellm_model: str
    api_base: str | None = None
    api_base_env: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 600.0
    max_context_tokens: int | None = None
    litellm_params: tuple[tuple[str, Any], ...] = ()
    passthrough: bool = False
    kind: Literal["upstream"] = "upstream"

    def upstream_model_name(self) -> str:
        """The model name an OpenAI-compatible upstream expects (provider prefix removed)."""
        provider, _, name = self.litellm_model.partition("/")
        return name if provider in PASSTHROUGH_PROVIDERS and name else self.litellm_model

    def resolved_api_base(self) -> str | None:
        """The endpoint of a call, read per request as the key is: the `api_base_env`
        variable's value, else `api_base`; None (litellm's provider default) only for a
        model that names neither variable nor base. A model whose `api_base_env` is unset
        or empty and that has no other endpoint (`api_base`, or `api_base` in
        `litellm_params`) raises `upstream_not_configured`: its calls, with the tenants'
        prompts, never go to the provider's default (`$OPENAI_BASE_URL`, api.openai.com)."""
        if self.api_base_env:
            value = env_value(self.api_base_env)
            if value:
                return value
            if not self.has_fixed_api_base():
                raise upstream_not_configured(self.name)
        return self.api_base

    def has_fixed_api_base(self) -> bool:
        """Whether the config file itself gives an endpoint (`api_base`, or `api_base` in
        `litellm_params`): what a call uses when the `api_base_env` variable is unset."""
        return bool(self.api_base or dict(self.litellm_params).get("api_base"))

    def resolved_api_key(self) -> str | None:
        """The `api_key_env` variable's value, the whitespace around it dropped (no key has
        any: a variable's trailing newline, from a file or `echo`, would make every call a
        502); None when the model names none, or the variable is unset, empty or only
        whitespace."""
        return env_value(self.api_key_env) if self.api_key_env else None

    def names_its_upstream(self) -> bool:
        """Whether the model names its own key or endpoint (`api_key_env`, `api_base`,
        `api_base_env`): then the provider's environment (`OPENAI_API_KEY`, ...) is
        never used for it."""
        return bool(self.api_key_env or self.api_base or self.api_base_env)

    def litellm_api_key(self) -> str | None:
        """The key litellm is given: the `api_key_env` variable's value; `NO_API_KEY` when
        that is unset or empty, or when the model names no key but has an `api_base`, so
        litellm never falls back to the provider's environment key (it would send the
        gateway's `OPENAI_API_KEY` to a third-party base). None (litellm reads the
        provider's environment) only for a model with neither."""
        key = self.resolved_api_key()
        return key if key else (NO_API_KEY if self.names_its_upstream() else None)

    def missing_variables_warning(self) -> str | None:
        """The start's one warning line for a model whose `api_key_env` variable is unset,
        empty or only whitespace (its calls go without a real key; the line says which), or
        whose `api_base_env` variable is unset or empty (its calls go to `api_base`, or fail
        when it has none); None when there is nothing to say."""
        problems = []
        if self.api_key_env and not self.resolved_api_key():
            held = "holds only whitespace" if os.environ.get(self.api_key_env) else "is not set (or empty)"
            problems.append(f"api_key_env names ${self.api_key_env}, which {held}: "
                            "its calls go upstream without an API key")
        if self.api_base_env and not env_value(self.api_base_env):
            problems.append(f"api_base_env names ${self.api_base_env}, which is not set (or empty): "
                            + ("its calls go to its api_base" if self.has_fixed_api_base()
                               else "its calls fail (503 upstream_not_configured)"))
        return "; ".join(problems) or None


def upstream_not_configured(model: str) -> ApiError:
    """503 for a call to a model that has no endpoint: its `api_base_env` variable is not
    set. The operator's to fix (a restart with the variable set), so `x-should-retry:
    false` and no `Retry-After`; the message names neither the variable nor any URL."""
    return ApiError(503, f"The model '{model}' has no upstream endpoint: the variable that names its "
                    "api_base is not set in the gateway's environment; please contact the operator of "
                    "this gateway.", "server_error", "upstream_not_configured", None,
                    {"x-should-retry": "false"})


def env_value(name: str) -> str | None:
    """The environment variable `name`'s value, the whitespace around it dropped (a key or
    an endpoint has none: a variable's trailing newline, from a file or `echo`, would make
    every call fail); None when it is unset, empty or only whitespace."""
    return os.environ.get(name, "").strip() or None


def check_litellm_model(litellm_model: str, *, passthrough: bool, litellm_params: dict,
                        api_base: str | None, where: str) -> None:
    """A ConfigError when a call to `litellm_model` could never be made: litellm knows no
    provider for it (resolved as a call resolves it, with `litellm_params`'
    `custom_llm_provider` and the model's `api_base`), or nothing names the model after
    the provider (`openai/`). Its calls would all be litellm's local 400, which blames
    the client. A model string under one of the OpenAI-compatible providers (and every
    passthrough model) is checked without importing litellm, which takes seconds."""
    provider, _, model = litellm_model.partition("/")
    custom_provider = litellm_params.get("custom_llm_provider")
    if passthrough or (provider in PASSTHROUGH_PROVIDERS and custom_provider is None):
        if not model.strip():
            raise ConfigError(f"{where}: litellm_model {litellm_model!r} names no model after its provider")
        return
    from gateway.upstream import import_litellm   # here: only a config that needs it pays for it

    litellm = import_litellm()
    try:
        model, provider, _, _ = litellm.get_llm_provider(
            litellm_model, custom_llm_provider=custom_provider, api_base=api_base)
    except Exception:
        provider = None
    if provider not in litellm.provider_list:
        if custom_provider is not None:
            raise ConfigError(f"{where}: litellm_params.custom_llm_provider {custom_provider!r} is not a "
                              "provider litellm knows")
        raise ConfigError(f"{where}: litellm_model {litellm_model!r} names no provider litellm knows "
                          "(e.g. 'openai/<model>' for an OpenAI-compatible server, 'anthropic/<model>'; "
                          "or set litellm_params.custom_llm_provider)")
    if not model.strip():
        raise ConfigError(f"{where}: litellm_model {litellm_model!r} names no model after its provider")


ModelConfig = LocalModelConfig | UpstreamModelConfig | EmbeddingModelConfig


def engine_tenants_problem(models: tuple[ModelConfig, ...], tenants: set[str]) -> str | None:
    """Why a local model's `[models.engine]` cannot be meant as written: its
    `tenant_weights` or `policy_options.static_shares` name a tenant the config does not
    have (a typo, or one removed: the entry would be ignored without a word); None when
    every name is a tenant's."""
    for index, model in enumerate(models):
        if not isinstance(model, LocalModelConfig):
            continue
        engine = dict(model.engine_options)
        for table, names in (("tenant_weights", engine.get("tenant_weights") or {}),
                             ("policy_options.static_shares",
                              dict(engine.get("policy_options") or {}).get("static_shares") or {})):
            unknown = sorted(name for name in names if name not in tenants)
            if unknown:
                known = sorted(tenants)
                return (f"models[{index}].engine.{table}: no tenant named {unknown[0]!r} (tenants: "
                        f"{', '.join(map(repr, known[:10]))}{', ...' if len(known) > 10 else ''})")
    return None


def model_config(table: dict, index: int) -> ModelConfig:
    where = f"models[{index}]"
    name = take(table, "name", str, where)
    kind = take(table, "kind", str, where, "local")
    if not name:
        raise ConfigError(f"{where}.name is required")
    if kind == "local":
        upstream_keys = [key for key in table if key in UPSTREAM_MODEL_KEYS and key not in LOCAL_MODEL_KEYS]
        if upstream_keys and "kind" not in table:   # else "unknown key", and not why
            raise ConfigError(f"{where}: {', '.join(map(repr, upstream_keys))} "
                              f"{'is an upstream key' if len(upstream_keys) == 1 else 'are upstream keys'}, "
                              'but kind is "local" when not given: set kind = "upstream"')
        reject_unknown_keys(table, LOCAL_MODEL_KEYS, where)
        num_workers = take(table, "num_workers", int, where, 2)
        if num_workers < 1:
            raise ConfigError(f"{where}.num_workers must be >= 1")
        engine = take(table, "engine", dict, where, {})
        check_toml_ints(engine, f"{where}.engine")
        try:   # here, not only with the other engine options: a start reads these tables first
            check_engine_tables(engine)
        except EngineOptionError as exc:
            raise ConfigError(f"{where}.engine: {exc}") from None
        return LocalModelConfig(name=name, path=take(table, "path", str, where,
                                                      DEFAULT_LOCAL_MODEL),
                                num_workers=num_workers,
                                engine_options=tuple(sorted(engine.items())))
    if kind == "upstream":
        reject_unknown_keys(table, UPSTREAM_MODEL_KEYS, where)
        litellm_model = take(table, "litellm_model", str, where)
        if not (litellm_model or "").strip():
            raise ConfigError(f"{where}.litellm_model is required for an upstream model")
        passthrough = bool(take(table, "passthrough", bool, where, False))
        if passthrough and not (table.get("api_base") or table.get("api_base_env")):
            raise ConfigError(f"{where}: passthrough needs api_base or api_base_env")
        if passthrough and litellm_model.partition("/")[0] not in PASSTHROUGH_PROVIDERS:
            raise ConfigError(f"{where}: passthrough needs an OpenAI-compatible provider "
                              f"({', '.join(PASSTHROUGH_PROVIDERS)})")
        check_toml_ints(table.get("litellm_params", {}), f"{where}.litellm_params")   # sent upstream as given
        config = UpstreamModelConfig(
            name=name, litellm_model=litellm_model, passthrough=passthrough,
            api_base=take(table, "api_base", str, where),
            api_base_env=key_setting(table, "api_base_env", where, is_list=False),
            api_key_env=key_setting(table, "api_key_env", where, is_list=False),
            timeout_s=float(positive(take(table, "timeout_s", (int, float), where, 600.0), f"{where}.timeout_s")),
            max_context_tokens=positive(take(table, "max_context_tokens", int, where),
                                         f"{where}.max_context_tokens"),
            litellm_params=tuple(sorted(take(table, "litellm_params", dict, where,
                                              {}).items())))
        params = dict(config.litellm_params)   # last: the only check that may import litellm
        check_litellm_model(litellm_model, passthrough=passthrough, litellm_params=params,
                            api_base=(env_value(config.api_base_env or "") or config.api_base
                                      or params.get("api_base")), where=f"{where} ({name!r})")
        return config
    if kind == "embedding":
        return embedding_model_config(table, name, where)
    raise ConfigError(f"{where}.kind must be 'local', 'upstream' or 'embedding', not {kind!r}")
