"""`POST /v1/embeddings`: the request as OpenAI defines it, checked before any backend.

Upstream models answer it through `litellm.aembedding` (`UpstreamBackend.embed`), local
encoder models (`kind = "embedding"`) in the gateway (`local_embeddings.py`). The local
chat models have no embedding head: they refuse it with a 400 naming `model`, rather than
answering with vectors nobody trained for similarity.

The upstream is always asked for float vectors; a client asking for `base64` (the
official OpenAI client's default) gets them packed here.

Invariants: a request that validated has a non-empty `input` of at most `MAX_INPUTS`
items, each a non-empty string or a non-empty list of token ids (>= 0); the reply's
`model` is the gateway's model name, never the provider's; a provider's reply reaches the
client only through `upstream_reply`'s checks (one vector per input, each a non-empty list
of numbers a float32 holds, all of one length, indexed 0..n-1; usage counts non-negative
integers), else it is a 502 `upstream_error` that charges its tenant nothing of it. Both
encodings of a vector hold the same numbers: OpenAI's vectors are float32 (`base64` is
their bytes), so a value past float32's range (`1e300`, which packs as `inf`) is garbage,
as NaN is, not a number to round.

Token accounting (`EmbeddingsCall`): a request reserves at least what its model will
count before it is admitted, so a tenant's budget and tokens/minute hold as a chat's do.
A local model counts its inputs' tokens exactly before admission
(`LocalEmbeddingBackend.prepare_embeddings`); an upstream model's request reserves an
upper bound (`EmbeddingsRequest.max_num_tokens`) and is charged the provider's count
once it answers, or, when it fails or its provider counts nothing (sends no usage), the
estimate an upstream chat prompt is charged (4 bytes a token). What it is charged counts
in `vllm:prompt_tokens_total` (`Registry.record_embedding_tokens`) under its call's `worker`.
"""
from __future__ import annotations

import base64
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.errors import ApiError, invalid_request
from gateway.litellm_errors import upstream_garbage
from gateway.upstream_usage import embedding_usage_from

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
# NOTE: tokens a tokenizer may add to a text beyond one per byte: its markers ([CLS] and
# [SEP], or BOS and EOS) and a sentencepiece word-start mark before the first byte
EXTRA_TOKENS_PER_TEXT = 3


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    model: str
    input: Any
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _check_input(cls, value: Any) -> Any:
        items = input_items(value)
        if items is None:
            raise ValueError("'input' must be a string, a list of strings, a list of token ids, or a list "
                             "of token-id lists")
        if not items:
            raise ValueError("'input' must not be empty")
        if len(items) > MAX_INPUTS:
            raise ValueError(f"'input' holds {len(items)} items; at most {MAX_INPUTS} are allowed")
        for item in items:
            if len(item) == 0:
                raise ValueError("'input' must not contain an empty string or an empty token list")
            if not isinstance(item, str) and min(item) < 0:
                raise ValueError("token ids in 'input' must be 0 or more")
        return value

    def estimated_tokens(self) -> int:
        """A typical count (4 bytes a token for text, token ids as many as they are): what
        a failed upstream request is charged, as a failed upstream chat's prompt is."""
        return sum(len(item) if isinstance(item, list) else len(item.encode()) // 4 + 1
                   for item in input_items(self.input))

    def max_num_tokens(self) -> int:
        """At least what any tokenizer counts (one token a byte of text, plus
        `EXTRA_TOKENS_PER_TEXT` a text; token ids as many as they are): what an upstream
        model's request reserves, so that its tenant's limits hold while it runs."""
        return sum(len(item) if isinstance(item, list) else len(item.encode()) + EXTRA_TOKENS_PER_TEXT
                   for item in input_items(self.input))


@dataclass(frozen=True, slots=True)
class EmbeddingsCall:
    """An embeddings request ready for admission: `num_reserved_tokens` is at least what
    its model will count (a local model's exact count), `num_failed_tokens` what it is
    charged if `run` fails once admitted, `num_cancelled_tokens` what it is charged if its
    client leaves while it runs, and `run` answers it (the reply's `usage` is what it is
    charged). `worker` names where it runs in the token metrics: "upstream" (as an
    upstream chat's `Finished` names it), or a local model's (`local_embeddings`)."""

    num_reserved_tokens: int
    num_failed_tokens: int
    num_cancelled_tokens: int
    run: Callable[[], Awaitable[dict]]
    worker: str = "upstream"


def upstream_call(request: EmbeddingsRequest, embed: Callable[[EmbeddingsRequest], Awaitable[dict]]
                  ) -> EmbeddingsCall:
    """`request` for an upstream model's `embed`: nothing is tokenized here, so it
    reserves the upper bound, and a failure or a client that leaves is charged the
    estimate, as is a reply that counts no tokens (`charged_upstream`)."""
    estimate = request.estimated_tokens()
    return EmbeddingsCall(request.max_num_tokens(), estimate, estimate,
                          functools.partial(charged_upstream, embed, request))


async def charged_upstream(embed: Callable[[EmbeddingsRequest], Awaitable[dict]], request: EmbeddingsRequest
                           ) -> dict:
    """`embed`'s reply to `request`, whose `usage` is what the tenant is charged: a reply
    that counts no tokens (the provider sent no usage, which litellm reports as zeros; no
    non-empty input is 0 tokens) reports and is charged the estimate, as an upstream
    chat's prompt is when its provider sends no usage."""
    reply = await embed(request)
    if not reply["usage"]["total_tokens"]:
        estimate = request.estimated_tokens()
        reply["usage"] = {"prompt_tokens": estimate, "total_tokens": estimate}
    return reply


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def input_items(value: Any) -> list[str] | list[list[int]] | None:
    """`input` as a list of inputs (one string or token list each); None when it has none
    of OpenAI's four shapes."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return None
    if all(isinstance(item, str) for item in value):
        return value
    if all(_is_token_id(item) for item in value):
        return [value] if value else []
    if all(isinstance(item, list) and all(_is_token_id(token) for token in item) for item in value):
        return value
    return None


def embeddings_refusal(model: str, backend) -> ApiError | None:
    """Why `backend` (serving `model`) takes no /v1/embeddings request, None when it does
    (it has `prepare_embeddings`, a local embedding model, or `embed`, an upstream one): for
    the endpoint, and for a batch of embeddings at its creation (gateway/batches_routes.py)."""
    if getattr(backend, "prepare_embeddings", None) is None and getattr(backend, "embed", None) is None:
        return unsupported_model(model)
    return None


def unsupported_model(model: str) -> ApiError:
    return invalid_request(f"The model '{model}' does not serve embeddings: it is a local chat model. Use an "
                           "embedding model (an upstream one, or a local one of kind \"embedding\").",
                           param="model", code="model_not_supported")


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _vector_width(vector: Any) -> int | None:
    """The length of a vector that is a non-empty flat list of numbers (not booleans)
    a float32 holds (finite, at most `FLOAT32_MAX` in size); None for anything else."""
    if not isinstance(vector, list) or not vector:
        return None
    try:
        array = np.asarray(vector)
    except (ValueError, TypeError):   # NOTE: ragged nesting
        return None
    if array.ndim != 1 or array.dtype.kind not in "iuf" or not np.isfinite(array).all() \
            or np.abs(array).max() > FLOAT32_MAX:
        return None
    return len(vector)


def upstream_reply(raw: Any, num_inputs: int) -> dict:
    """The provider's reply to `num_inputs` inputs (a litellm object or plain JSON),
    checked, as `reply_body` takes it: `data` holds exactly one vector per input, each a
    non-empty list of finite numbers, all of one length, with the indices 0 to
    `num_inputs` - 1 once each (an item without one is at its position); they come back
    in index order. Usage counts must be non-negative integers
    (`upstream_replies.embedding_usage_from`); a prompt count it did not send (or sent as
    0) is its total, as an embedding's tokens are all prompt. Anything else raises a 502
    `upstream_error` (`upstream_garbage`), so it never reaches the client or its
    tenant's spent tokens."""
    body = raw.model_dump(warnings=False) if hasattr(raw, "model_dump") else raw
    if not isinstance(body, dict):
        raise upstream_garbage("embeddings: the reply is not a JSON object")
    data = body.get("data")
    if not isinstance(data, list):
        raise upstream_garbage("embeddings: data is not a list")
    if len(data) != num_inputs:
        raise upstream_garbage(f"embeddings: {len(data)} vectors for {num_inputs} inputs")
    by_index: dict[int, list] = {}
    widths = set()
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise upstream_garbage("embeddings: an item of data is not an object")
        index = position if item.get("index") is None else item["index"]
        if not _is_token_id(index) or not 0 <= index < num_inputs or index in by_index:
            raise upstream_garbage(f"embeddings: the indices are not 0 to {num_inputs - 1}, each once")
        widths.add(_vector_width(item.get("embedding")))
        if None in widths:
            raise upstream_garbage("embeddings: a vector is not a non-empty list of finite float32 numbers")
        by_index[index] = item["embedding"]
    if len(widths) > 1:
        raise upstream_garbage("embeddings: the vectors differ in length")
    num_prompt_tokens, num_total_tokens = embedding_usage_from(body.get("usage"))
    return {"data": [{"index": index, "embedding": by_index[index]} for index in range(num_inputs)],
            "usage": {"prompt_tokens": num_prompt_tokens or num_total_tokens, "total_tokens": num_total_tokens}}


def reply_body(raw: Any, model: str, encoding_format: str | None = None) -> dict:
    """The provider's reply (float vectors) as an OpenAI embeddings list, named after the
    gateway's model; with `encoding_format` "base64" each vector is packed as OpenAI packs
    it (little-endian float32, base64), which also serves providers that only send floats."""
    body = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    data = []
    for index, item in enumerate(body.get("data") or []):
        vector = item["embedding"]
        if encoding_format == "base64" and isinstance(vector, list):
            vector = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": item.get("index", index), "embedding": vector})
    usage = body.get("usage") or {}
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": usage.get("prompt_tokens") or usage.get("total_tokens") or 0,
                      "total_tokens": usage.get("total_tokens") or usage.get("prompt_tokens") or 0}}


def reply_json(reply: dict) -> bytes:
    """`reply` (`reply_body`'s) as the JSON bytes Starlette's `JSONResponse` renders, one
    item of `data` at a time: rendered on a thread, it gives the GIL back between vectors,
    so the event loop keeps serving while 2,048 float vectors of 1,024 (46 MB) render;
    one `json.dumps` of it all holds the GIL, wherever it runs, for seconds."""
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    head = encode({key: value for key, value in reply.items() if key != "data"})[1:-1]
    items = ",".join([encode(item) for item in reply.get("data", ())])
    return ("{" + (head + "," if head else "") + '"data":[' + items + "]}").encode("utf-8")
