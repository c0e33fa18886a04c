"""A local embedding model (`kind = "embedding"`): a Hugging Face encoder directory.

    [[models]]
    name = "bge-small"
    kind = "embedding"
    path = "/models/bge-small-en-v1.5"   # config.json, weights and tokenizer files
    pooling = "cls"                      # "mean" (default), "cls" or "last"
    normalize = true                     # unit-length vectors (default)
    max_input_tokens = 512               # default: the model's position limit
    batch_size = 32                      # inputs per forward pass

Nothing is downloaded: the directory must hold the model. Invariant: a config that parsed
names a pooling this gateway implements and positive sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config_values import ConfigError, positive, reject_unknown_keys, take

POOLINGS = ("mean", "cls", "last")


@dataclass(frozen=True, slots=True)
class EmbeddingModelConfig:
    name: str
    path: str
    pooling: Literal["mean", "cls", "last"] = "mean"
    normalize: bool = True
    max_input_tokens: int | None = None
    batch_size: int = 32
    kind: Literal["embedding"] = "embedding"


EMBEDDING_MODEL_KEYS = ("name", "kind", "path", "pooling", "normalize", "max_input_tokens", "batch_size")


def embedding_model_config(table: dict, name: str, where: str) -> EmbeddingModelConfig:
    reject_unknown_keys(table, EMBEDDING_MODEL_KEYS, where)
    path = take(table, "path", str, where)
    if not path:
        raise ConfigError(f"{where}.path is required for an embedding model (a local model directory)")
    pooling = take(table, "pooling", str, where, "mean")
    if pooling not in POOLINGS:
        raise ConfigError(f"{where}.pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    return EmbeddingModelConfig(
        name=name, path=path, pooling=pooling, normalize=bool(take(table, "normalize", bool, where, True)),
        max_input_tokens=positive(take(table, "max_input_tokens", int, where), f"{where}.max_input_tokens"),
        batch_size=positive(take(table, "batch_size", int, where, 32), f"{where}.batch_size"))
