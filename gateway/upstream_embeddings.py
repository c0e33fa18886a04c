"""Embeddings from an upstream model, through `litellm.aembedding` (`UpstreamBackend.embed`).

Invariants: one upstream call (no SDK retries unless `litellm_params` asks for them:
`NO_SDK_RETRIES`); provider errors OpenAI-shaped with the model's own keys redacted; a
reply of the wrong shape a 502 (`embeddings.upstream_reply`); a model answered by
litellm's text `mock_response` refuses embeddings with a 400 naming `model` (litellm would
answer with the text as the vector). A failure is logged by the caller,
`UpstreamBackend.embed` (a 5xx as a chat run's: `upstream.log_failure`).
"""
from __future__ import annotations

from collections.abc import Callable

from gateway.config import UpstreamModelConfig
from gateway.embeddings import EmbeddingsRequest, input_items, reply_body, upstream_reply
from gateway.errors import ApiError, invalid_request
from gateway.litellm_errors import map_litellm_error, redacted, upstream_garbage


class _NoSdkRetries(int):
    """`max_retries=0` that litellm's OpenAI embeddings call keeps: it reads `max_retries
    or DEFAULT_MAX_RETRIES` (2), so a plain 0 gave the OpenAI SDK 2 hidden retries (an
    upstream 429 waited out its `Retry-After` twice, a hang took 3 x `timeout_s`). It is
    0 to the SDK, but true."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True


NO_SDK_RETRIES = _NoSdkRetries(0)


async def embed_upstream(model_id: str, config: UpstreamModelConfig, common_kwargs: Callable[..., dict],
                         litellm, secrets: tuple[str, ...], request: EmbeddingsRequest) -> dict:
    """`request` answered by the upstream model `model_id` (`litellm`: the module;
    `secrets`: the keys never quoted back)."""
    mock_response = dict(config.litellm_params).get("mock_response")
    if mock_response is not None and not isinstance(mock_response, list):
        raise invalid_request(f"The model '{model_id}' answers with a fixed text (litellm's "
                              "mock_response); it does not serve embeddings.",
                              param="model", code="model_not_supported")
    body = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"encoding_format"})
    kwargs = common_kwargs(body, stream=False)
    if not kwargs.get("max_retries"):
        kwargs["max_retries"] = NO_SDK_RETRIES
    if "dimensions" in body:
        # litellm refuses `dimensions` for models it does not know to take it; the
        # upstream is the judge (its refusal comes back as its own 400)
        kwargs["allowed_openai_params"] = [*kwargs.get("allowed_openai_params", ()), "dimensions"]
    try:
        raw = await litellm.aembedding(**kwargs)
    except ApiError:
        raise
    except Exception as exc:   # an upstream may quote the key it was sent
        raise redacted(map_litellm_error(exc, prompt_param="input"), secrets) from None
    try:
        return reply_body(upstream_reply(raw, len(input_items(request.input))), model_id,
                          request.encoding_format)
    except ApiError:
        raise
    except Exception as exc:   # NOTE: an embeddings reply of the wrong shape
        raise upstream_garbage(f"embeddings: {type(exc).__name__}: {exc}") from None
