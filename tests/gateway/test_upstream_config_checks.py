"""An upstream model's config is checked where a call could never succeed: a
`litellm_model` whose provider litellm does not know (or that names no model) is refused
at the start (exit 2) and on reload; an `api_base_env` that is unset warns at the start,
and its calls fail with a 503 instead of going to the provider's default endpoint."""
from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.cli import main
from gateway.config import ConfigError, key_digest, load_config, parse_config
from gateway.errors import ApiError
from gateway.model_configs import UpstreamModelConfig, model_config
from gateway.passthrough import PassthroughBackend
from gateway.reload import reload_tenants
from gateway.schemas import ChatCompletionRequest
from gateway.upstream import UpstreamBackend
from gateway.upstream_kwargs import call_kwargs

REPO = Path(__file__).resolve().parents[2]
TENANT = '\n[[tenants]]\nname = "t"\napi_key_sha256 = ["' + key_digest("sk-t") + '"]\n'
UNSET = "STEPAHEAD_TEST_UNSET_BASE"
PROVIDER_DEFAULT = "http://10.9.8.7:4321/v1"   # stands in for $OPENAI_BASE_URL / api.openai.com


def _upstream(litellm_model: str, **table) -> dict:
    return {"name": "up", "kind": "upstream", "litellm_model": litellm_model, **table}


def _toml(litellm_model: str) -> str:
    return f'[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "{litellm_model}"\n' \
           'litellm_params = { mock_response = "hi" }\n' + TENANT


@pytest.mark.parametrize("table, problem", [
    (_upstream("notaprovider/normal-x"), "names no provider litellm knows"),
    (_upstream("normal-x", api_base="http://127.0.0.1:18610/v1"), "names no provider litellm knows"),
    (_upstream("openai/"), "names no model after its provider"),
    (_upstream("hosted_vllm/  "), "names no model after its provider"),
    (_upstream("openai/", passthrough=True, api_base="http://127.0.0.1:18610/v1"),
     "names no model after its provider"),
    (_upstream("x", litellm_params={"custom_llm_provider": "bogus"}), "custom_llm_provider 'bogus'"),
    (_upstream("   "), "litellm_model is required"),
])
def test_an_upstream_model_no_call_could_reach_is_refused_naming_the_model(table, problem):
    with pytest.raises(ConfigError) as refused:
        model_config(table, 3)
    assert problem in str(refused.value) and str(refused.value).startswith("models[3]")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("table", [
    _upstream("openai/gpt-4o-mini"),
    _upstream("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", api_base="http://10.0.0.5:8000/v1"),
    _upstream("gpt-4o-mini"),   # litellm knows OpenAI's own model names
    _upstream("anthropic/claude-x"),
    _upstream("my-model", api_base="http://127.0.0.1:18610/v1", litellm_params={"custom_llm_provider": "openai"}),
    _upstream("my-model", api_base="https://api.groq.com/openai/v1"),   # litellm reads the provider off the base
])
def test_a_model_string_litellm_resolves_loads(table):
    assert model_config(table, 0).litellm_model == table["litellm_model"]


def test_the_example_config_still_loads(monkeypatch):
    monkeypatch.setenv("SUPPORT_BOT_API_KEY", "sk-support-example")
    assert [m.name for m in load_config(REPO / "examples" / "stepahead.toml").models][:3] == [
        "smollm2", "gpt-4o-mini", "team-vllm"]


def test_serve_exits_2_with_one_line_for_a_provider_litellm_does_not_know(tmp_path, capsys, monkeypatch):
    def serving(config):   # a config that loaded would start serving here
        raise AssertionError(f"the config loaded: {config.models}")
    monkeypatch.setattr("gateway.serve_command.local_model_problem", serving)
    config = tmp_path / "bad.toml"
    config.write_text(_toml("notaprovider/normal-x"))
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == ("stepahead: bad config: models[0] ('up'): litellm_model 'notaprovider/normal-x' names no "
                   "provider litellm knows (e.g. 'openai/<model>' for an OpenAI-compatible server, "
                   "'anthropic/<model>'; or set litellm_params.custom_llm_provider)\n")


def test_a_reload_to_a_provider_litellm_does_not_know_keeps_the_running_config(tmp_path, caplog):
    path = tmp_path / "gw.toml"
    path.write_text(_toml("openai/gpt-4o-mini"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    path.write_text(_toml("notaprovider/normal-x") + TENANT.replace('"t"', '"t2"').replace(key_digest("sk-t"),
                                                                                          key_digest("sk-t2")))
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running and [t.name for t in state.config.tenants] == ["t"]
    assert (f"stepahead: the tenants were not reloaded from {path}: models[0] ('up'): litellm_model "
            "'notaprovider/normal-x' names no provider litellm knows") in caplog.text


def test_an_openai_compatible_model_string_is_checked_without_importing_litellm():
    """litellm's import takes seconds: the common configs (and the tests') must not pay it."""
    code = ("import sys; from gateway.config import parse_config, key_digest; "
            "parse_config({'models': [{'name': 'a', 'kind': 'upstream', 'litellm_model': 'openai/gpt-4o-mini'}, "
            "{'name': 'b', 'kind': 'upstream', 'litellm_model': 'hosted_vllm/q', 'api_base': 'http://x'}], "
            "'tenants': [{'name': 't', 'api_key_sha256': [key_digest('k')]}]}); "
            "print('litellm' in sys.modules)")
    ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "False", ran.stderr


# ---- api_base_env naming an unset variable


def _unset_base(monkeypatch, **fields) -> UpstreamModelConfig:
    monkeypatch.delenv(UNSET, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", PROVIDER_DEFAULT)
    monkeypatch.setenv("OPENAI_API_BASE", PROVIDER_DEFAULT)
    return UpstreamModelConfig(name="up", litellm_model="openai/normal-x", api_base_env=UNSET, **fields)


def _assert_not_configured(error: ApiError) -> None:
    assert (error.status, error.code, error.type) == (503, "upstream_not_configured", "server_error")
    assert error.headers == {"x-should-retry": "false"}   # final: a batch line does not retry it
    assert "'up'" in error.message and "api_base" in error.message
    assert "10.9.8.7" not in error.message and UNSET not in error.message


@pytest.mark.parametrize("backend_class", [UpstreamBackend, PassthroughBackend])
def test_a_call_to_a_model_whose_api_base_env_is_unset_fails_instead_of_going_elsewhere(monkeypatch, backend_class):
    config = _unset_base(monkeypatch, passthrough=backend_class is PassthroughBackend)
    chat = ChatCompletionRequest(model="up", messages=[{"role": "user", "content": "tenant private prompt"}])
    with pytest.raises(ApiError) as failed:
        asyncio.run(backend_class(config).prepare_chat(chat, "t", "r1"))
    _assert_not_configured(failed.value)


def test_the_variable_is_read_per_request_and_api_base_is_its_fallback(monkeypatch):
    config = _unset_base(monkeypatch)
    monkeypatch.setenv(UNSET, "http://127.0.0.1:18611/v1")   # set later: the next request uses it
    assert call_kwargs(config, {"messages": []}, False)["api_base"] == "http://127.0.0.1:18611/v1"
    monkeypatch.delenv(UNSET)
    with_base = _unset_base(monkeypatch, api_base="http://127.0.0.1:18612/v1")
    assert call_kwargs(with_base, {"messages": []}, False)["api_base"] == "http://127.0.0.1:18612/v1"
    params_base = _unset_base(monkeypatch, litellm_params=(("api_base", "http://127.0.0.1:18613/v1"),))
    assert call_kwargs(params_base, {"messages": []}, False)["api_base"] == "http://127.0.0.1:18613/v1"
    with pytest.raises(ApiError) as failed:   # an empty api_base is none: litellm would use its default
        call_kwargs(_unset_base(monkeypatch, api_base=""), {"messages": []}, False)
    _assert_not_configured(failed.value)


def test_a_client_gets_an_openai_shaped_503_and_the_start_warns(monkeypatch, caplog):
    monkeypatch.delenv(UNSET, raising=False)
    config = parse_config({"models": [_upstream("openai/normal-x", passthrough=True, api_base_env=UNSET)],
                           "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-t")]}]})
    with caplog.at_level(logging.WARNING, logger="stepahead"), TestClient(build_app(config)) as client:
        reply = client.post("/v1/chat/completions", headers={"Authorization": "Bearer sk-t"},
                            json={"model": "up", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 503 and reply.headers["x-should-retry"] == "false"
    assert reply.json()["error"]["code"] == "upstream_not_configured"
    assert (f"stepahead: model 'up': api_base_env names ${UNSET}, which is not set (or empty): its calls fail "
            "(503 upstream_not_configured)") in caplog.text


def test_the_start_warning_names_both_unset_variables_in_one_line(monkeypatch):
    monkeypatch.delenv("STEPAHEAD_TEST_UNSET_KEY", raising=False)
    config = _unset_base(monkeypatch, api_key_env="STEPAHEAD_TEST_UNSET_KEY", api_base="http://127.0.0.1:18612/v1")
    assert config.missing_variables_warning() == (
        "api_key_env names $STEPAHEAD_TEST_UNSET_KEY, which is not set (or empty): its calls go upstream without "
        f"an API key; api_base_env names ${UNSET}, which is not set (or empty): its calls go to its api_base")
    monkeypatch.setenv(UNSET, "http://127.0.0.1:18611/v1")
    monkeypatch.setenv("STEPAHEAD_TEST_UNSET_KEY", "sk-x")
    assert config.missing_variables_warning() is None
