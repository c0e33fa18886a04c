"""A model's `api_key_env` value is a key without the whitespace around it (QA157 F3):
a variable's trailing newline (a secret file made with `echo`) made every call a 502
("header injection" through litellm, `ValueError` on the passthrough), and a variable
holding only whitespace sent `Bearer    ` with no warning. Now such a variable is an
unset key, with the start's warning line, as a tenant's key variable is refused."""
from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.model_configs import NO_API_KEY, UpstreamModelConfig
from gateway.upstream import UpstreamBackend
from gateway.upstream_kwargs import call_kwargs
from tests.gateway import fake_openai
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_kwargs import upstream_request

KEY_ENV = "STEPAHEAD_TEST_MODEL_KEY_WS"


@pytest.fixture(scope="module")
def api_base():
    yield from served_url(fake_openai.app)


def model(api_base: str | None = None, passthrough: bool = False) -> UpstreamModelConfig:
    return UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base=api_base,
                               api_key_env=KEY_ENV, passthrough=passthrough)


@pytest.mark.parametrize("value", ["sk-abc\n", "sk-abc\r\n", " sk-abc ", "\tsk-abc"])
def test_the_whitespace_around_a_key_is_no_part_of_it(monkeypatch, value):
    monkeypatch.setenv(KEY_ENV, value)
    assert model().resolved_api_key() == "sk-abc"
    assert call_kwargs(model(), {}, stream=False)["api_key"] == "sk-abc"
    assert model().missing_variables_warning() is None


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_key_with_a_trailing_newline_reaches_the_upstream_whole(monkeypatch, api_base, passthrough):
    monkeypatch.setenv(KEY_ENV, "sk-abc\n")
    assert upstream_request(model(api_base, passthrough), {})["authorization"] == "Bearer sk-abc"


@pytest.mark.parametrize("value", ["   ", "\n", " \t\r\n"])
def test_a_variable_holding_only_whitespace_is_no_key(monkeypatch, value):
    monkeypatch.setenv(KEY_ENV, value)
    assert model().resolved_api_key() is None
    assert model().litellm_api_key() == NO_API_KEY   # never the provider's environment key
    assert call_kwargs(model(), {}, stream=False)["api_key"] == NO_API_KEY


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_whitespace_key_sends_no_blank_bearer(monkeypatch, api_base, passthrough):
    monkeypatch.setenv(KEY_ENV, "   ")
    seen = upstream_request(model(api_base, passthrough), {})["authorization"]
    assert seen == (None if passthrough else f"Bearer {NO_API_KEY}")   # as for an unset variable


def test_the_start_warns_of_a_whitespace_key_and_says_what_it_holds(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="stepahead.gateway")
    monkeypatch.setenv(KEY_ENV, "  \n")
    asyncio.run(UpstreamBackend(model()).start())
    assert [record.getMessage() for record in caplog.records] == [
        f"stepahead: model 'm': api_key_env names ${KEY_ENV}, which holds only whitespace: "
        "its calls go upstream without an API key"]


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_or_empty_variable_keeps_its_documented_line(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, value)
    assert model().missing_variables_warning() == (
        f"api_key_env names ${KEY_ENV}, which is not set (or empty): its calls go upstream without an API key")


def test_a_whitespace_key_leaves_the_operators_litellm_params_key(monkeypatch):
    # before, "   " took the place of litellm_params' api_key
    monkeypatch.setenv(KEY_ENV, "   ")
    config = UpstreamModelConfig(name="m", litellm_model="openai/x", api_key_env=KEY_ENV,
                                 litellm_params=(("api_key", "sk-from-params"),))
    assert call_kwargs(config, {}, stream=False)["api_key"] == "sk-from-params"


BASE_ENV = "STEPAHEAD_TEST_MODEL_BASE_WS"


def test_an_api_base_variable_is_stripped_and_one_of_only_whitespace_is_unset(monkeypatch):
    """FI58's note: `api_base_env` was read as it stood: a trailing newline went into every
    call's URL, and a whitespace-only value was taken as an endpoint."""
    config = UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base="http://fixed/v1",
                                 api_base_env=BASE_ENV)
    monkeypatch.setenv(BASE_ENV, "http://from-env/v1\n")
    assert config.resolved_api_base() == "http://from-env/v1"
    monkeypatch.setenv(BASE_ENV, "  \n")
    assert config.resolved_api_base() == "http://fixed/v1"
    assert f"api_base_env names ${BASE_ENV}, which is not set (or empty)" in config.missing_variables_warning()
