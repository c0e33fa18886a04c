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
chat and completions on it are a 400 naming `model`; an input the tokenizer makes no
token of is a 400 naming `input` (nothing to pool).

Loading (`_load`): models load one at a time (`MODEL_LOADING`), since transformers sets
torch's process-wide default dtype while it builds one, and loads side by side built each
other's parameters in the wrong dtype; a loaded model's floating-point parameters have
the dtype its config.json names (float32 when it names none the engine knows), else it
is refused. A directory is refused at start-up without a tokenizer that knows more than
its special tokens, or whose tokenizer has ids past the model's embedding matrix; token
ids are checked against that matrix's rows (`vocab_size`), never the tokenizer's size.
"""
from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gateway.backend import ChatEvent, Prepared, WithoutWorkers
from gateway.embedding_model import EmbeddingModelConfig
from gateway.embeddings import EmbeddingsCall, EmbeddingsRequest, input_items, reply_body
from gateway.errors import ApiError, invalid_request
from shards.model_files import DTYPE_NAMES, TOKENIZER_FILES, ModelLoadError, check_tokenizer_fits
from shards.transformers_names import transformers_names


# the `worker` label of a local embedding model's tokens (`/metrics`): it runs in the gateway's process
EMBEDDING_WORKER = "gateway"
# NOTE: process-wide by nature, as torch's default dtype is: held while a model is built
MODEL_LOADING = threading.Lock()
# files transformers builds an encoder's tokenizer from: a chat model's, and the older
# vocabularies of BERT (WordPiece) and sentencepiece encoders (T5, XLM-R)
EMBEDDING_TOKENIZER_FILES = (*TOKENIZER_FILES, "vocab.txt", "spiece.model", "sentencepiece.bpe.model")


class EmbeddingModelError(ModelLoadError):
    """The model directory cannot be served (missing, not a model, no tokenizer that fits
    it, or parameters built in the wrong dtype): a stated start failure, one line
    (gateway/start_failure.py), as a chat model's `ModelLoadError` is."""


def check_embedding_model(path: str) -> None:
    """Raise `EmbeddingModelError` unless `path` looks like a model directory: its
    config.json and a tokenizer's files (without them transformers builds a tokenizer of
    special tokens only, which makes every word the unknown token)."""
    if not (Path(path) / "config.json").is_file():
        raise EmbeddingModelError(f"{path} is not a model directory (no config.json there)")
    if not any((Path(path) / name).is_file() for name in EMBEDDING_TOKENIZER_FILES):
        raise EmbeddingModelError(f"{path} holds no tokenizer (none of {', '.join(EMBEDDING_TOKENIZER_FILES)} "
                                  "there): every word would be embedded as the unknown token")


def configured_dtype_name(path: str) -> str:
    """The dtype the model's config.json names ("dtype", or the older "torch_dtype"),
    when it is one the engine knows (`DTYPE_NAMES`); "float32" otherwise."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EmbeddingModelError(f"{path}/config.json cannot be read as JSON: {exc}") from exc
    named = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    return named if named in DTYPE_NAMES else "float32"


def misbuilt_parameters(model, dtype) -> list[str]:
    """The names of `model`'s floating-point parameters not of `dtype` (those of the
    modules transformers keeps in float32 may be float32)."""
    import torch

    kept = set(getattr(model, "_keep_in_fp32_modules", None) or ()) \
        | set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    return [name for name, parameter in model.named_parameters()
            if parameter.is_floating_point() and parameter.dtype != dtype
            and not (parameter.dtype == torch.float32 and kept & set(name.split(".")))]


def check_tokenizer(path: str, tokenizer, num_embedded: int) -> None:
    """Raise `EmbeddingModelError` when `tokenizer` knows nothing but its special tokens,
    or has ids the model's embedding matrix (`num_embedded` rows) cannot embed."""
    if not set(tokenizer.get_vocab().values()) - set(tokenizer.all_special_ids):
        raise EmbeddingModelError(f"the tokenizer in {path} knows only its special tokens: every word would be "
                                  "embedded as the unknown token")
    try:
        check_tokenizer_fits(path, len(tokenizer), num_embedded)
    except ModelLoadError as exc:
        raise EmbeddingModelError(str(exc)) from exc


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
        self._vocab_size = 0   # the model's embedding rows: token ids run below it
        # NOTE: a fast tokenizer's call may reset its truncation or padding, which trips
        # ("Already borrowed") another thread's call in flight: one at a time
        self._tokenizer_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"embed-{config.name}")

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    def _load(self) -> None:
        check_embedding_model(self.config.path)
        AutoModel, AutoTokenizer = transformers_names("AutoModel", "AutoTokenizer")   # NOTE: imports torch
        import torch

        tokenizer = AutoTokenizer.from_pretrained(self.config.path, local_files_only=True)
        dtype = getattr(torch, configured_dtype_name(self.config.path))
        with MODEL_LOADING:
            model = AutoModel.from_pretrained(self.config.path, local_files_only=True, dtype=dtype).eval()
        misbuilt = misbuilt_parameters(model, dtype)
        if misbuilt:
            raise EmbeddingModelError(f"the model in {self.config.path} was built with {len(misbuilt)} parameters "
                                      f"({misbuilt[0]}, …) not of its dtype {dtype}: something beside it changed "
                                      "torch's default dtype while it loaded")
        num_embedded = model.get_input_embeddings().num_embeddings
        check_tokenizer(self.config.path, tokenizer, num_embedded)
        limits = [self.config.max_input_tokens, position_limit(model.config)]
        self._max_tokens = min(limit for limit in limits if limit) if any(limits) else None
        self._vocab_size = num_embedded
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
        checked against the model's vocabulary and the length limit; a text the tokenizer
        makes no token of is a 400 (nothing to pool)."""
        vocab_size = self._vocab_size
        out = []
        for index, item in enumerate(items):
            if isinstance(item, str):
                with self._tokenizer_lock:
                    ids = self._tokenizer(item)["input_ids"]
            else:
                ids = list(item)
            if not ids:
                raise invalid_request(f"Input {index} has no tokens: the model '{self.model_id}' tokenizes its text "
                                      "to nothing (whitespace only, or characters its tokenizer drops).",
                                      param="input", code="invalid_value")
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
