"""An upstream failure the gateway answers with a 5xx writes one WARNING line to the
gateway's log, through litellm ("lite") and forwarded ("pass"): the request's id, the
tenant, the model and the reason, never the upstream key (whole or a quoted fragment) nor
an `Authorization` value; a client's own mistake (a 4xx) writes none. Embeddings too (they
wrote none)."""
import asyncio
import json
import logging
import os

import pytest

from gateway.embeddings import EmbeddingsRequest
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import free_port, start_server

KEY_ENV = "STEPAHEAD_TEST_FI1_UPSTREAM_KEY"
KEY = "sk-UPSTREAM-fi1-SECRET-0123456789"
PATHS = ("lite", "pass")
LOGGER = "stepahead.gateway"


async def app(scope, receive, send) -> None:
    """"client" (the last message, or an embeddings request's input): a 400; anything else a
    500 whose message quotes the Authorization header it got and the key's first 14 characters."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    text = body["messages"][-1]["content"] if "messages" in body else body["input"]
    text = text[0] if isinstance(text, list) else text
    authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
    status, message = (400, "bad field") if text == "client" else (
        500, f"boom: got {authorization} cut={KEY[:14]}")
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(
        {"error": {"message": message, "type": "server_error", "param": None, "code": None}}).encode()})


@pytest.fixture(scope="module")
def base_url():
    os.environ[KEY_ENV] = KEY
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    server = start_server(app)
    yield f"{server.base_url}/v1"
    server.stop()
    os.environ.pop(KEY_ENV, None)


def _ask(path: str, api_base: str, text: str, stream: bool = False):
    """The exception that ended the run of one chat request of tenant "alice"."""
    config = UpstreamModelConfig(name=f"up-{path}", litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=KEY_ENV, timeout_s=3.0, passthrough=path == "pass")
    request = validate(ChatCompletionRequest, {
        "model": config.name, "messages": [{"role": "user", "content": text}], "stream": stream})

    async def run():
        up = (PassthroughBackend if path == "pass" else UpstreamBackend)(config)
        await up.start()
        try:
            async for _ in up.run(await up.prepare_chat(request, "alice", "chatcmpl-fi1xyz")):
                pass
        except Exception as exc:   # the test looks at what escaped
            return exc
        finally:
            await up.stop()
        return None
    return asyncio.run(run())


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_500_logs_one_redacted_warning(base_url, path, stream, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _ask(path, base_url, "hi", stream=stream)
    assert getattr(error, "status", None) == 502, repr(error)
    [line] = _lines(caplog)
    assert "chatcmpl-fi1xyz" in line and "alice" in line and f"up-{path}" in line and "502" in line
    assert "boom" in line
    assert KEY not in line and KEY[:14] not in line and "Bearer sk-" not in line
    assert KEY[:14] not in error.message   # nor does the client's error quote the key's beginning


@pytest.mark.parametrize("path", PATHS)
def test_an_unreachable_upstream_logs_one_warning_without_its_address(path, caplog, monkeypatch):
    # the key is set here too: run where the module's fake upstream (which sets it) is not up,
    # the start warned that it was missing, a second line (CI, tests spread over two processes)
    monkeypatch.setenv(KEY_ENV, KEY)
    port = free_port()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _ask(path, f"http://127.0.0.1:{port}/v1", "hi")
    assert getattr(error, "status", None) == 502, repr(error)
    [line] = _lines(caplog)
    assert "chatcmpl-fi1xyz" in line and "upstream_unavailable" in line and str(port) not in line


@pytest.mark.parametrize("path", PATHS)
def test_a_clients_own_mistake_logs_nothing(base_url, path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _ask(path, base_url, "client")
    assert getattr(error, "status", None) == 400, repr(error)
    assert _lines(caplog) == []


def _embed(path: str, api_base: str, text: str, **ids):
    """The exception that ended one embeddings request (of tenant "alice", when `ids` say so)."""
    config = UpstreamModelConfig(name=f"up-{path}", litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=KEY_ENV, timeout_s=3.0, passthrough=path == "pass")

    async def run():
        up = (PassthroughBackend if path == "pass" else UpstreamBackend)(config)
        await up.start()
        try:
            await up.embed(validate(EmbeddingsRequest, {"model": config.name, "input": text}), **ids)
        except Exception as exc:   # the test looks at what escaped
            return exc
        finally:
            await up.stop()
        return None
    return asyncio.run(run())


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_embeddings_500_logs_one_redacted_warning(base_url, path, caplog):
    """(was: no line at all for a failed embeddings call)"""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _embed(path, base_url, "hi", tenant="alice", request_id="req-fi149emb")
    assert getattr(error, "status", None) == 502, repr(error)
    [line] = _lines(caplog)
    assert line.startswith(f"stepahead: upstream failure: request req-fi149emb, tenant alice, model up-{path}: 502 ")
    assert "boom" in line
    assert KEY not in line and KEY[:14] not in line and "Bearer sk-" not in line


@pytest.mark.parametrize("path", PATHS)
def test_an_unreachable_embeddings_upstream_logs_one_warning(path, caplog, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    port = free_port()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _embed(path, f"http://127.0.0.1:{port}/v1", "hi")
    assert getattr(error, "status", None) == 502, repr(error)
    [line] = _lines(caplog)   # a caller that names no request: "-"
    assert line.startswith(f"stepahead: upstream failure: request -, tenant -, model up-{path}: 502 ")
    assert "upstream_unavailable" in line and str(port) not in line


@pytest.mark.parametrize("path", PATHS)
def test_a_clients_own_embeddings_mistake_logs_nothing(base_url, path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        error = _embed(path, base_url, "client", tenant="alice", request_id="req-fi149emb")
    assert getattr(error, "status", None) == 400, repr(error)
    assert _lines(caplog) == []
