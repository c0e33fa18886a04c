"""What an upstream's reply carries through to the client: a refusal (chat's
`message.refusal` / `delta.refusal`, a Responses `refusal` content part), the usage's
`completion_tokens_details`, `system_fingerprint` and `service_tier`."""
import openai
import pytest

from gateway.backend import Finished, RefusalDelta, TextDelta
from tests.gateway.conftest import KEYS
from tests.gateway.fake_openai import REFUSAL
from tests.gateway.test_upstream_faults import PATHS, ask, base_url  # noqa: F401

REFUSED = "".join(REFUSAL)


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_a_refusal_event_not_an_empty_answer(base_url, path, stream):  # noqa: F811
    if path == "lite" and stream:
        pytest.skip("litellm's stream wrapper drops chunks whose delta holds only `refusal` "
                    "(streaming_handler.is_chunk_non_empty)")
    events, error, _ = ask(path, base_url, "refusal", stream=stream)
    assert error is None, repr(error)
    assert "".join(e.refusal for e in events if isinstance(e, RefusalDelta)) == REFUSED
    assert not any(isinstance(e, TextDelta) for e in events) and events[-1].finish_reason == "stop"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_usage_details_fingerprint_and_tier_pass_on(base_url, path, stream):  # noqa: F811
    events, error, _ = ask(path, base_url, "reasoned", stream=stream)
    assert error is None, repr(error)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.usage.completion_tokens_details == {"reasoning_tokens": 2}
    assert finished.system_fingerprint == "fp_fake"
    if not (path == "lite" and stream):   # litellm's stream chunks say no service_tier
        assert finished.service_tier == "default"


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_chat_carries_the_refusal(client, model):
    message = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "refusal"}]).choices[0].message
    assert message.refusal == REFUSED and not message.content


def test_a_chat_stream_carries_the_refusal(client):
    chunks = list(client.chat.completions.create(
        model="fake-direct", messages=[{"role": "user", "content": "refusal"}], stream=True))
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices) == REFUSED
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_responses_carry_the_refusal_as_a_content_part(client):
    whole = client.responses.create(model="fake", input="refusal")
    assert [part.model_dump() for part in whole.output[0].content] == [{"type": "refusal", "refusal": REFUSED}]
    events = list(client.responses.create(model="fake-direct", input="refusal", stream=True))
    kinds = [event.type for event in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.refusal.delta", "response.refusal.delta",
                     "response.refusal.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    assert events[6].refusal == REFUSED
    assert events[-1].response.output[0].content[0].model_dump() == {"type": "refusal", "refusal": REFUSED}
    follow_up = client.responses.create(model="fake", input="ping", previous_response_id=whole.id)
    assert follow_up.output_text == "echo: ping"   # a refused turn continues
    sent_back = client.responses.create(model="fake-direct", input=[
        {"role": "user", "content": "refusal"}, whole.output[0].model_dump(), {"role": "user", "content": "ping"}])
    assert sent_back.output_text == "echo: ping"   # its refusal part is taken as input too


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_chat_and_responses_report_the_upstreams_reasoning_tokens(client, model):
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "reasoned"}])
    assert reply.usage.completion_tokens_details.reasoning_tokens == 2
    assert (reply.system_fingerprint, reply.service_tier) == ("fp_fake", "default")
    response = client.responses.create(model=model, input="reasoned")
    assert response.usage.output_tokens_details.reasoning_tokens == 2
    assert response.service_tier == "default"


def test_a_stream_names_the_fingerprint_and_details_once_known(client):
    chunks = list(client.chat.completions.create(
        model="fake-direct", messages=[{"role": "user", "content": "reasoned"}], stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 2
    assert chunks[-1].system_fingerprint == "fp_fake" and chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-2].system_fingerprint == "fp_fake"
