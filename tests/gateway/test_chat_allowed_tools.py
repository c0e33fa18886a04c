"""Chat completions' `tool_choice` of type `allowed_tools` (OpenAI's, in the SDK's
`ChatCompletionAllowedToolChoiceParam`), or any type but "function", is refused as the
Responses API refuses it (QA159 finding 2, FI60): a 400 `unsupported_value` naming
`tool_choice`, not the schema's "Input should be 'function'"."""
from __future__ import annotations

import os

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError
from gateway.schemas import ChatCompletionRequest, NamedToolChoice, validate
from tests.gateway.serving import start_server

P = {"type": "object", "properties": {"x": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": P}},
         {"type": "function", "function": {"name": "g", "parameters": P}}]
ALLOWED = {"type": "allowed_tools", "allowed_tools": {"mode": "required",
                                                     "tools": [{"type": "function", "function": {"name": "f"}}]}}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
KEY = "sk-fi60-chat"


@pytest.mark.parametrize("choice", [ALLOWED, {"type": "custom", "custom": {"name": "f"}}])
def test_a_tool_choice_of_another_type_is_an_unsupported_value(choice):
    with pytest.raises(ApiError) as caught:
        validate(ChatCompletionRequest, {**BODY, "tool_choice": choice})
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "tool_choice", "unsupported_value")
    assert f"A tool_choice of type {choice['type']!r} is not supported" in error.message
    assert "Input should be" not in error.message


@pytest.mark.parametrize("choice, param", [
    ({"type": "function"}, "tool_choice.function"),   # a named function without its name: still the schema's
    ({"type": 5, "function": {"name": "f"}}, "tool_choice"),
    ("sometimes", "tool_choice"),
])
def test_other_bad_tool_choices_are_still_the_schemas_400s(choice, param):
    with pytest.raises(ApiError) as caught:
        validate(ChatCompletionRequest, {**BODY, "tool_choice": choice})
    assert caught.value.param.startswith(param) and caught.value.code != "unsupported_value"


def test_the_choices_chat_takes_are_unchanged():
    named = validate(ChatCompletionRequest, {**BODY, "tool_choice": {"type": "function", "function": {"name": "f"}}})
    assert isinstance(named.tool_choice, NamedToolChoice) and named.forces_call()
    for choice in ("none", "auto", "required", None):
        assert validate(ChatCompletionRequest, {**BODY, "tool_choice": choice}).tool_choice == choice


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory):
    """A gateway of one upstream model (never reached: the requests are refused first)."""
    folder = tmp_path_factory.mktemp("fi60chat")
    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    config = parse_config({"server": {"responses_db": str(folder / "responses.sqlite3")},
                           "models": [{"name": "m", "kind": "upstream", "litellm_model": "openai/m",
                                       "api_base": "http://127.0.0.1:9/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
                           "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEY)]}],
                           "tracing": {"store_path": str(folder / "traces.sqlite3")}})
    server = start_server(build_app(config))
    yield f"{server.base_url}/v1"
    server.stop()


def test_chat_and_responses_refuse_allowed_tools_alike(gateway_url):
    headers = {"Authorization": f"Bearer {KEY}"}
    chat = httpx.post(f"{gateway_url}/chat/completions", headers=headers, timeout=30,
                      json={**BODY, "tool_choice": ALLOWED})
    responses = httpx.post(f"{gateway_url}/responses", headers=headers, timeout=30, json={
        "model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": P}],
        "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}})
    assert chat.status_code == responses.status_code == 400
    chat_error, responses_error = chat.json()["error"], responses.json()["error"]
    for key in ("type", "param", "code"):
        assert chat_error[key] == responses_error[key]
    assert (chat_error["param"], chat_error["code"]) == ("tool_choice", "unsupported_value")
    assert chat_error["message"].startswith("A tool_choice of type 'allowed_tools' is not supported: only function")
