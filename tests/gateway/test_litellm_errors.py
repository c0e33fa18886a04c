"""Upstream errors as the client sees them, through litellm ("lite") and forwarded
("pass"): the upstream's own 400 details kept, a model the upstream does not know the
gateway's fault (502), and never the key the gateway sent."""
import os

import pytest

from gateway.litellm_errors import REDACTED, one_line, redact
from gateway.retry_after import MAX_RETRY_AFTER_S, retry_after_headers
from tests.gateway.test_http_errors import assert_error, post
from tests.gateway.test_upstream_faults import KEY_ENV, PATHS, ask, assert_api_error, base_url  # noqa: F401


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_error_quoting_the_key_it_was_sent_is_redacted(base_url, path):  # noqa: F811
    _, error, _ = ask(path, base_url, "keyecho")
    assert error.status == 400
    assert os.environ[KEY_ENV] not in error.message and "upstream-secret" not in error.message
    assert error.message == f"Bad request with key Bearer {REDACTED} (key {REDACTED})"


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_400_keeps_its_param_code_and_own_message(base_url, path):  # noqa: F811
    _, error, _ = ask(path, base_url, "badparam")
    assert (error.status, error.param, error.code) == (400, "temperature", "invalid_value")
    assert error.message == "Invalid value for 'temperature': must be <= 2."   # no "BadRequestError: OpenAIException - "


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_that_does_not_know_the_model_is_a_502(base_url, path):  # noqa: F811
    _, error, _ = ask(path, base_url, "status:404")
    assert_api_error(error, 502, "upstream_error")
    assert "does not know the model this gateway is configured" in error.message


def test_a_client_sees_a_502_not_model_not_found_for_a_listed_model(gateway):
    for model in ("fake", "fake-direct"):
        error = assert_error(post(gateway, {"model": model, "messages": [{"role": "user", "content": "status:404"}]}),
                             502, "upstream_error")
        assert error["type"] == "server_error"


def test_a_secret_is_redacted_also_where_a_message_was_cut():
    secret = "sk-abcdefghijklmnop"
    assert redact(f"key {secret} is bad", [secret]) == f"key {REDACTED} is bad"
    assert redact("x" * 200 + " sk-abcdefg…", [secret]) == "x" * 200 + f" {REDACTED}…"
    assert redact("a short sk…", [secret]) == "a short sk…"   # too little of it to say
    assert one_line("Incorrect header: Bearer sk-live-123, try again") == f"Incorrect header: Bearer {REDACTED}, try again"


def test_an_object_repr_in_an_upstream_message_keeps_only_its_class_name():
    # aiohttp's words when a hosted_vllm/ upstream is down: no memory address reaches the client
    # (nor the upstream's own: test_passthrough_errors.py)
    text = ("Cannot connect to host vllm:8000 ssl:<ssl.SSLContext object at 0x7f3a2c1d9e40> "
            "[Connect call failed ('10.0.0.7', 8000)]")
    assert one_line(text) == ("Cannot connect to host <address> ssl:<SSLContext> "
                              "[Connect call failed ('<address>', 8000)]")
    assert one_line("state <Foo object at 0xdeadBEEF> and <not a repr>") == "state <Foo> and <not a repr>"
    assert one_line("<function f at 0x7f12ab> <ssl.SSLSocket fd=7 at 0xbeef> <weakref at 0x12ab; to 'X' at 0x99>") \
        == "<function f> <ssl.SSLSocket fd=7> <weakref; to 'X'>"   # no address of any repr


def test_a_retry_after_of_thousands_of_digits_is_the_longest_wait_not_a_500():
    assert retry_after_headers("9" * 5000) == {"Retry-After": str(MAX_RETRY_AFTER_S)}
    assert retry_after_headers("30") == {"Retry-After": "30"}


def test_an_upstream_409_stays_a_409_with_its_code_and_param():
    """QA180 finding 3: a conflict with the request's own state is the client's, as a 400 is
    (the SDK's ConflictError), never a 502 `upstream_error`; through litellm and forwarded."""
    from gateway.litellm_errors import map_litellm_error, map_upstream_status
    from tests.gateway.test_litellm_upstream_causes import _as_litellm_maps

    conflict = {"message": "The thing is being changed by another request.", "type": "invalid_request_error",
                "param": "thing_id", "code": "conflict"}
    for error in (map_litellm_error(_as_litellm_maps(409, conflict)),
                  map_upstream_status(409, conflict["message"], conflict["code"], param=conflict["param"])):
        assert (error.status, error.type, error.code, error.param, error.message) == (
            409, "invalid_request_error", "conflict", "thing_id", conflict["message"])
    bare = map_upstream_status(409, "conflict")   # no code of its own: named as any other refusal
    assert (bare.status, bare.code) == (409, "upstream_rejected")
