"""The metaschema check of a schema not yet passed for the tenant runs in a worker thread,
not on the event loop (QA139 H1: an `anyOf` of 4,999 objects stalled every tenant for
1-10 s); a schema that passed before is checked inline (no thread hop). Errors are the
same either way; the checker's memory is safe to share between the loop and threads."""
from __future__ import annotations

import asyncio
import threading

import pytest
from starlette.testclient import TestClient

from gateway import chat_checks, local, schema_checks
from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError
from gateway.reply_format import reply_schema
from gateway.schema_checks import SchemaChecker, check_off_loop
from gateway.schemas import ChatCompletionRequest, validate
from tests.gateway.local_stand_ins import EngineFacts, bare_local_backend

KEY = "sk-schema-off-loop"
AUTH = {"Authorization": f"Bearer {KEY}"}
VALID = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SAME_REORDERED = {"required": ["city"], "properties": {"city": {"type": "string"}}, "type": "object"}
INVALID = {"type": "object", "properties": {"city": {"type": "nope"}}}


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_unchecked_says_whether_some_schema_has_not_passed_for_the_tenant():
    checker = SchemaChecker()
    assert checker.unchecked("acme", [VALID])
    assert not checker.unchecked("acme", [])
    assert not checker.unchecked("acme", [None])   # a tool without parameters has nothing to check
    checker.check("acme", VALID)
    assert not checker.unchecked("acme", [VALID, SAME_REORDERED, None])
    assert checker.unchecked("acme", [VALID, {"type": "object", "title": "new"}])
    assert checker.unchecked("globex", [VALID])   # per tenant
    with pytest.raises(Exception):
        checker.check("acme", INVALID)
    assert checker.unchecked("acme", [INVALID])   # a failed schema is never remembered
    assert len(checker) == 1                       # `unchecked` only reads


async def test_check_off_loop_runs_an_unseen_schemas_check_in_a_thread_and_a_seen_ones_inline():
    checker = SchemaChecker()
    ran_on_loop = []

    def check(schema):
        ran_on_loop.append(_on_loop())
        checker.check("acme", schema)
        return "checked"

    assert await check_off_loop(checker, "acme", [VALID], check, VALID) == "checked"
    assert await check_off_loop(checker, "acme", [SAME_REORDERED], check, SAME_REORDERED) == "checked"
    assert ran_on_loop == [False, True]
    with pytest.raises(Exception) as caught:   # raised in the thread, raised here the same
        await check_off_loop(checker, "acme", [INVALID], check, INVALID)
    assert type(caught.value).__name__ == "SchemaError" and ran_on_loop[-1] is False


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    config = parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                       "litellm_params": {"mock_response": "hi"}}],
                           "tenants": [{"name": "t", "api_key_sha256": [key_digest(KEY)]}],
                           "tracing": {"enabled": False},
                           "server": {"responses_db": str(tmp_path_factory.mktemp("app") / "responses.sqlite3")}})
    with TestClient(build_app(config)) as test_client:
        yield test_client


@pytest.fixture
def tool_checks_on_loop(monkeypatch):
    """Per `check_chat_request` a route ran: whether it ran on the event loop's thread."""
    on_loop = []
    real = chat_checks.check_chat_request

    def recording(*args):
        on_loop.append(_on_loop())
        return real(*args)

    from gateway import responses_routes, routes
    monkeypatch.setattr(routes, "check_chat_request", recording)
    monkeypatch.setattr(responses_routes, "check_chat_request", recording)
    return on_loop


def _tools(schema: dict, path: str = "/v1/chat/completions") -> list[dict]:
    if path == "/v1/responses":
        return [{"type": "function", "name": "f", "parameters": schema}]
    return [{"type": "function", "function": {"name": "f", "parameters": schema}}]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": "mock", "input": "hi", "store": False}),
])
def test_a_routes_unseen_tool_schema_is_checked_off_the_loop_then_inline(client, tool_checks_on_loop, path, body):
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "title": path}
    first = client.post(path, headers=AUTH, json={**body, "tools": _tools(schema, path)})
    again = client.post(path, headers=AUTH, json={**body, "tools": _tools(schema, path)})
    none = client.post(path, headers=AUTH, json=body)
    assert [first.status_code, again.status_code, none.status_code] == [200, 200, 200], first.text
    assert tool_checks_on_loop == [False, True, True]


def test_an_invalid_tool_schema_checked_off_the_loop_is_the_same_400(client, tool_checks_on_loop):
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "tools": _tools(INVALID)}
    for _ in range(2):
        reply = client.post("/v1/chat/completions", headers=AUTH, json=body)
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["code"] == "invalid_function_parameters" and error["param"] == "tools[0].function.parameters"
        assert error["message"].startswith("Invalid JSON Schema for tool 'f': ")
    assert tool_checks_on_loop == [False, False]   # never remembered: off the loop each time


def _format_request(schema: dict) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {
        "model": "plain", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})


class _Stop(Exception):
    pass


async def test_a_local_models_unseen_response_format_schema_is_checked_off_the_loop(monkeypatch):
    backend = bare_local_backend(EngineFacts(supports_tools=True))
    on_loop = []

    def recording(*args):
        on_loop.append(_on_loop())
        reply_schema(*args)
        raise _Stop   # what follows needs an engine

    monkeypatch.setattr(local, "reply_schema", recording)
    for _ in range(2):
        with pytest.raises(_Stop):
            await backend.prepare_chat(_format_request(VALID), "acme", "r")
    with pytest.raises(_Stop):
        await backend.prepare_chat(_format_request(VALID), "globex", "r")
    with pytest.raises(_Stop):   # no json_schema format: nothing to check
        await backend.prepare_chat(validate(ChatCompletionRequest, {
            "model": "plain", "messages": [{"role": "user", "content": "json"}],
            "response_format": {"type": "json_object"}}), "acme", "r")
    assert on_loop == [False, True, False, True]
    monkeypatch.undo()
    with pytest.raises(ApiError) as caught:   # the real reply_schema's 400, raised in the thread
        await backend.prepare_chat(_format_request(INVALID), "acme", "r")
    assert caught.value.param == "response_format.json_schema.schema"
    assert caught.value.message.startswith("Invalid JSON Schema: ")


def test_the_checkers_memory_is_not_held_while_a_schema_is_checked(monkeypatch):
    """A thread in the middle of a slow metaschema check does not block the loop's
    `unchecked` nor another schema's `check`."""
    checker = SchemaChecker()
    checker.check("acme", VALID)
    started, release = threading.Event(), threading.Event()
    real = schema_checks.validator_for

    class Slow:
        def __init__(self, schema):
            self.schema = schema

        def check_schema(self, schema):
            if schema.get("title") == "slow":
                started.set()
                assert release.wait(10)
            real(schema).check_schema(schema)

    monkeypatch.setattr(schema_checks, "validator_for", Slow)
    slow = {"type": "object", "title": "slow"}
    worker = threading.Thread(target=checker.check, args=("acme", slow))
    worker.start()
    try:
        assert started.wait(10)
        assert not checker.unchecked("acme", [VALID])
        assert checker.unchecked("acme", [slow])
        checker.check("acme", {"type": "object", "title": "other"})
    finally:
        release.set()
        worker.join(10)
    assert not checker.unchecked("acme", [slow]) and len(checker) == 3


def test_the_checkers_memory_stays_consistent_under_threads():
    checker = SchemaChecker(capacity=8)
    schemas = [{"type": "object", "title": f"s{i}"} for i in range(24)]
    errors = []

    def work(offset: int) -> None:
        try:
            for round_ in range(60):
                schema = schemas[(offset + round_) % len(schemas)]
                checker.check("acme", schema)
                checker.unchecked("acme", schemas[:3])
        except Exception as exc:   # noqa: BLE001 - any error is the failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(checker) == 8
