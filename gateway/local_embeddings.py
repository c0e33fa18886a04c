"""`POST /v1/embeddings` from a local encoder model (`kind = "embedding"`), in the gateway.

The model runs on one background thread of the gateway process, one batch at a time
(torch releases the GIL, so the event loop keeps serving). Inputs are tokenized before
the request is admitted (`prepare_embeddings`, on a worker thread as a chat prompt is),
then cut into batches of `batch_size`, each padded to its longest input, and pooled
(`mean` over the input's tokens, the first token's state `cls`, or the `last` token's).

Invariants: a request reserves of its tenant's tokens exactly what it is charged, the
count of its inputs' tokens (special tokens included; token ids as many as they are), so
the tenant's budget and tokens/minute hold as for a chat (a request the model fails on
once admitted, a 500, is charged nothing); an input's vector does not depend on the
other inputs of its batch (padding is masked out of attention and pooling); vectors have
unit length when `normalize` (`dimensions` keeps the first N components, renormalized
when `normalize`); an input longer than the model's limit (`max_input_tokens`, else what
its position embeddings take: `position_limit`) is a 400 naming `input`, never silently
cut, refused before admission (it charges nothing); the model only serves embeddings:
chat and completions on it are a 400 naming `model`.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gateway.backend import ChatEvent, Prepared, WithoutWorkers
from gateway.embedding_model import EmbeddingModelConfig
from gateway.embeddings import EmbeddingsCall, EmbeddingsRequest, input_items, reply_body
from gateway.errors import ApiError, invalid_request
from shards.transformers_names import transformers_names


# the `worker` label of a local embedding model's tokens (`/metrics`): it runs in the gateway's process
EMBEDDING_WORKER = "gateway"


class EmbeddingModelError(RuntimeError):
    """The model directory cannot be served (missing, or not a model)."""


def check_embedding_model(path: str) -> None:
    """Raise `EmbeddingModelError` unless `path` looks like a model directory."""
    if not (Path(path) / "config.json").is_file():
        raise EmbeddingModelError(f"{path} is not a model directory (no config.json there)")


# NOTE: transformers' model types whose position ids start after the padding index
# (`create_position_ids_from_input_ids`: RoBERTa and its kin, XLM-R, MPNet)
OFFSET_POSITION_TYPES = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "roberta-prelayernorm", "camembert", "data2vec-text", "ibert",
    "longformer", "luke", "mpnet", "xmod", "esm"})


def position_limit(config) -> int | None:
    """The most tokens an input may have for the model's position embeddings (None when
    its config names no limit): `max_position_embeddings`, less the positions a
    RoBERTa-like model skips, whose ids run from `padding_idx` + 1 (514 -> 512 for
    XLM-R, 8194 -> 8192 for bge-m3). MPNet's `padding_idx` is 1 whatever its config says;
    an ESM model with rotary positions skips none."""
    limit = getattr(config, "max_position_embeddings", None)
    if not limit or getattr(config, "model_type", None) not in OFFSET_POSITION_TYPES \
            or getattr(config, "position_embedding_type", None) not in (None, "absolute"):
        return limit or None
    padding_idx = 1 if config.model_type == "mpnet" else getattr(config, "pad_token_id", None) or 0
    return limit - padding_idx - 1


def embeddings_only(model: str) -> ApiError:
    return invalid_request(f"The model '{model}' is an embedding model: it serves /v1/embeddings only.",
                           param="model", code="model_not_supported")


class LocalEmbeddingBackend(WithoutWorkers):
    def __init__(self, config: EmbeddingModelConfig) -> None:
        self.config = config
        self.model_id = config.name
        self.owned_by = "stepahead"
        self._model = None
        self._tokenizer = None
        self._max_tokens: int | None = None
        # NOTE: a fast tokenizer's call may reset its truncation or padding, which trips
        # ("Already borrowed") another thread's call in flight: one at a time
        self._tokenizer_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"embed-{config.name}")

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    def _load(self) -> None:
        check_embedding_model(self.config.path)
        AutoModel, AutoTokenizer = transformers_names("AutoModel", "AutoTokenizer")   # NOTE: imports torch

        tokenizer = AutoTokenizer.from_pretrained(self.config.path, local_files_only=True)
        model = AutoModel.from_pretrained(self.config.path, local_files_only=True).eval()
        limits = [self.config.max_input_tokens, position_limit(model.config)]
        self._max_tokens = min(limit for limit in limits if limit) if any(limits) else None
        self._tokenizer, self._model = tokenizer, model

    def cancel_start(self) -> None:
        """Nothing to stop: the model loads in one call, seconds at most."""

    async def stop(self) -> None:
        self._executor.shutdown(wait=True)

    def health(self) -> dict:
        return {"model": self.model_id, "kind": "embedding", "ready": self._model is not None}

    async def prepare_chat(self, request, tenant: str, request_id: str) -> Prepared:
        raise embeddings_only(self.model_id)

    async def prepare_completion(self, request, tenant: str, request_id: str) -> Prepared:
        raise embeddings_only(self.model_id)

    async def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]:
        raise embeddings_only(self.model_id)
        yield  # NOTE: makes this an async generator, as the Backend protocol says

    async def prepare_embeddings(self, request: EmbeddingsRequest) -> EmbeddingsCall:
        """`request` checked and tokenized (off the event loop), to be admitted for its
        exact count of tokens; a request the model cannot take is refused here, before
        admission."""
        if self._model is None:
            raise ApiError(503, f"The model '{self.model_id}' is still loading.", "server_error",
                           "model_not_ready", None, {"Retry-After": "1"})
        hidden = self._model.config.hidden_size
        if request.dimensions is not None and request.dimensions > hidden:
            raise invalid_request(f"'dimensions' must be at most {hidden} for the model '{self.model_id}'.",
                                  param="dimensions", code="invalid_value")
        ids = await asyncio.to_thread(self._token_ids, input_items(request.input))
        num_tokens = sum(len(row) for row in ids)
        # NOTE: a model that fails once admitted is the gateway's fault: it charges nothing;
        # a client that leaves is charged its count, as the batch in flight runs to its end
        return EmbeddingsCall(num_tokens, 0, num_tokens, functools.partial(self._embed_ids, ids, num_tokens, request),
                              worker=EMBEDDING_WORKER)

    async def embed(self, request: EmbeddingsRequest) -> dict:
        return await (await self.prepare_embeddings(request)).run()

    async def _embed_ids(self, ids: list[list[int]], num_tokens: int, request: EmbeddingsRequest) -> dict:
        vectors = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._embed, ids, request.dimensions)
        raw = {"data": [{"index": index, "embedding": vector} for index, vector in enumerate(vectors)],
               "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens}}
        # NOTE: packing 2,048 vectors as base64 takes a while: off the event loop
        return await asyncio.to_thread(reply_body, raw, self.model_id, request.encoding_format)

    def _token_ids(self, items: list) -> list[list[int]]:
        """Each input as token ids (text with the model's special tokens; ids as given),
        checked against the vocabulary and the length limit."""
        vocab_size = len(self._tokenizer)
        out = []
        for index, item in enumerate(items):
            if isinstance(item, str):
                with self._tokenizer_lock:
                    ids = self._tokenizer(item)["input_ids"]
            else:
                ids = list(item)
            if self._max_tokens is not None and len(ids) > self._max_tokens:
                raise invalid_request(f"Input {index} is {len(ids)} tokens long; the model '{self.model_id}' "
                                      f"takes at most {self._max_tokens}.", param="input",
                                      code="context_length_exceeded")
            if max(ids) >= vocab_size:
                raise invalid_request(f"Input {index} holds token id {max(ids)}, outside the model's "
                                      f"vocabulary of {vocab_size}.", param="input", code="invalid_value")
            out.append(ids)
        return out

    def _embed(self, ids: list[list[int]], dimensions: int | None) -> list[list[float]]:
        import torch

        pad = self._tokenizer.pad_token_id or 0
        vectors: list[list[float]] = []
        with torch.inference_mode():
            for start in range(0, len(ids), self.config.batch_size):
                batch = ids[start:start + self.config.batch_size]
                width = max(len(row) for row in batch)
                input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in batch])
                mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in batch])
                states = self._model(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
                pooled = self._pooled(states, mask)
                if dimensions is not None:
                    pooled = pooled[:, :dimensions]
                if self.config.normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                vectors.extend(pooled.tolist())
        return vectors

    def _pooled(self, states, mask):
        if self.config.pooling == "cls":
            return states[:, 0]
        if self.config.pooling == "last":
            return states[range(states.shape[0]), mask.sum(dim=1) - 1]
        weights = mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(dim=1) / weights.sum(dim=1)
