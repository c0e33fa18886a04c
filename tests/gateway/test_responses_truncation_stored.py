"""QA154 finding 2: `truncation: "auto"` on a `previous_response_id` chain stored the
history it had cut, so its dropped turns were gone from every later continuation: one
with `truncation: "disabled"` ran on the last turns only (200) where the same turns in a
`conversation` are kept. The cut is the prompt of the request that needed it; the
response stores the whole history, so that continuation is a 400
`context_length_exceeded`, and `input_items` list what the client sent. On the tiny
model (a context of 8,192 tokens)."""
import openai
import pytest

from tests.gateway.conftest import KEYS

LONG_TURN = "word " * 600   # 3,000 tokens for the tiny model's tokenizer


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_an_auto_truncated_response_keeps_the_whole_chain_for_the_next(client):
    turn = {"model": "tiny", "max_output_tokens": 2, "truncation": "auto"}
    first = client.responses.create(input=LONG_TURN + "One.", **turn)
    second = client.responses.create(input=LONG_TURN + "Two.", previous_response_id=first.id, **turn)
    assert second.usage.input_tokens > 6000   # both turns fit: nothing cut yet
    third = client.responses.create(input=LONG_TURN + "Three.", previous_response_id=second.id, **turn)
    assert 6000 < third.usage.input_tokens < 8192   # this prompt was cut to two turns: three (9,000) do not fit
    listed = client.responses.input_items.list(third.id, order="asc")
    assert [part.text for item in listed.data for part in item.content] == [LONG_TURN + "Three."]
    with pytest.raises(openai.BadRequestError) as caught:   # was 200: the chain had lost its first turn
        client.responses.create(model="tiny", input="Which word?", previous_response_id=third.id,
                                max_output_tokens=2, truncation="disabled")
    assert caught.value.code == "context_length_exceeded"
    fourth = client.responses.create(input="Which word?", previous_response_id=third.id, **turn)
    assert fourth.status in ("completed", "incomplete") and fourth.usage.input_tokens < 8192
