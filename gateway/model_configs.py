"""The `[[models]]` tables of the gateway's config: local models (served by local
workers), upstream models (through litellm, or passed through), embedding models.

Invariants: every record is frozen; a table's unknown keys, missing names and bad kinds,
and a local model's engine tables of the wrong shape (`check_engine_tables`), are a
ConfigError naming `models[i]`; secrets are never held, only the names of the
environment variables that hold them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from gateway.config_values import ConfigError, positive, reject_unknown_keys, take
from gateway.embedding_model import EmbeddingModelConfig, embedding_model_config
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
        if self.api_base_env and os.environ.get(self.api_base_env):
            return os.environ[self.api_base_env]
        return self.api_base

    def resolved_api_key(self) -> str | None:
        """The `api_key_env` variable's value; None when the model names none, or the
        variable is unset or empty."""
        return (os.environ.get(self.api_key_env) or None) if self.api_key_env else None

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

    def missing_key_warning(self) -> str | None:
        """The start's warning for a model whose `api_key_env` variable is unset or empty
        (its calls go without a real key); None when there is nothing to say."""
        if self.api_key_env and not self.resolved_api_key():
            return (f"api_key_env names ${self.api_key_env}, which is not set (or empty): "
                    "its calls go upstream without an API key")
        return None


ModelConfig = LocalModelConfig | UpstreamModelConfig | EmbeddingModelConfig


def model_config(table: dict, index: int) -> ModelConfig:
    where = f"models[{index}]"
    name = take(table, "name", str, where)
    kind = take(table, "kind", str, where, "local")
    if not name:
        raise ConfigError(f"{where}.name is required")
    if kind == "local":
        reject_unknown_keys(table, LOCAL_MODEL_KEYS, where)
        num_workers = take(table, "num_workers", int, where, 2)
        if num_workers < 1:
            raise ConfigError(f"{where}.num_workers must be >= 1")
        engine = take(table, "engine", dict, where, {})
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
        if not litellm_model:
            raise ConfigError(f"{where}.litellm_model is required for an upstream model")
        passthrough = bool(take(table, "passthrough", bool, where, False))
        if passthrough and not (table.get("api_base") or table.get("api_base_env")):
            raise ConfigError(f"{where}: passthrough needs api_base or api_base_env")
        if passthrough and litellm_model.partition("/")[0] not in PASSTHROUGH_PROVIDERS:
            raise ConfigError(f"{where}: passthrough needs an OpenAI-compatible provider "
                              f"({', '.join(PASSTHROUGH_PROVIDERS)})")
        return UpstreamModelConfig(
            name=name, litellm_model=litellm_model, passthrough=passthrough,
            api_base=take(table, "api_base", str, where),
            api_base_env=take(table, "api_base_env", str, where),
            api_key_env=take(table, "api_key_env", str, where),
            timeout_s=float(positive(take(table, "timeout_s", (int, float), where, 600.0), f"{where}.timeout_s")),
            max_context_tokens=positive(take(table, "max_context_tokens", int, where),
                                         f"{where}.max_context_tokens"),
            litellm_params=tuple(sorted(take(table, "litellm_params", dict, where,
                                              {}).items())))
    if kind == "embedding":
        return embedding_model_config(table, name, where)
    raise ConfigError(f"{where}.kind must be 'local', 'upstream' or 'embedding', not {kind!r}")
