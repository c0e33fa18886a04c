"""A `LocalBackend` with no engine started, for the checks `prepare_chat` and
`prepare_completion` make before any worker runs: the engine is a stand-in record of the
attributes they read (`EngineFacts`)."""
from __future__ import annotations

from dataclasses import dataclass

from gateway.config import LocalModelConfig
from gateway.local import LocalBackend
from gateway.schema_checks import SchemaChecker


@dataclass
class EngineFacts:
    supports_tools: bool
    max_context_tokens: int = 100
    tokenizer: object = None


def bare_local_backend(engine: EngineFacts, **attributes) -> LocalBackend:
    """A LocalBackend for model "plain" (16 tokens reserved by default) over `engine`,
    with `attributes` set too (`prompt_tokens`, `tenant_budget_room`, ...)."""
    local = object.__new__(LocalBackend)
    local.config = LocalModelConfig(name="plain")
    local.model_id = "plain"
    local.default_completion_reserve_tokens = 16
    local.engine = engine
    local.schemas = SchemaChecker()
    for name, value in attributes.items():
        setattr(local, name, value)
    return local
