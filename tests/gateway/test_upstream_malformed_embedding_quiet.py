"""An upstream embeddings reply whose vector is a string is a 502, and pydantic's multi-line
serializer warning, raised inside litellm's `aembedding` as it dumps the unchecked reply,
never reaches the gateway's log (gateway/upstream.py, `import_litellm`)."""
import asyncio
import json
import warnings

import pytest

from gateway.embeddings import EmbeddingsRequest
from gateway.errors import ApiError
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server


async def string_vector_upstream(scope, receive, send) -> None:
    if await request_body(scope, receive, send) is None:
        return
    reply = {"object": "list", "model": "up", "usage": {"prompt_tokens": 1, "total_tokens": 1},
             "data": [{"object": "embedding", "index": 0, "embedding": "nope"}]}
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(reply).encode()})


@pytest.fixture(scope="module")
def api_base():
    server = start_server(string_vector_upstream)
    yield f"{server.base_url}/v1"
    server.stop()


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_string_vector_is_a_502_without_pydantics_serializer_warning(api_base, passthrough):
    async def embed() -> Exception | None:
        config = UpstreamModelConfig(name="emb", litellm_model="openai/up", api_base=api_base,
                                     passthrough=passthrough)
        backend = (PassthroughBackend if passthrough else UpstreamBackend)(config)
        await backend.start()
        try:
            await backend.embed(validate(EmbeddingsRequest, {"model": "emb", "input": "x"}))
        except ApiError as error:
            return error
        finally:
            await backend.stop()
        return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")   # what a log would show, every time
        error = asyncio.run(embed())
    assert isinstance(error, ApiError) and error.status == 502 and "vector" in error.message
    serializer = [str(w.message) for w in caught if "serializer" in str(w.message).lower()]
    assert serializer == []
