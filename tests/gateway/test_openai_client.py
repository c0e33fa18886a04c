"""The official `openai` client against a real stepahead server (tiny local model)."""
import datetime
import json
import math
import re
import typing
import uuid

import httpx
import openai
import pydantic
import pytest

from tests.gateway.conftest import KEYS

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                     "required": ["q"]}}}
ASK = [{"role": "system", "content": "You are terse."},
       {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}]


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


@pytest.fixture
def aclient(gateway):
    return openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"],
                              max_retries=0)


def test_client_lists_and_retrieves_models(client):
    listed = {m.id: m for m in client.models.list()}
    assert set(listed) == {"tiny", "mock", "fake", "fake-direct"}
    tiny = client.models.retrieve("tiny")
    assert tiny == listed["tiny"] and tiny.object == "model" and tiny.owned_by
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0).models.retrieve("tiny")


def test_deleting_a_model_is_refused_as_the_sdk_expects(client):
    """QA144: DELETE /v1/models/{model} (OpenAI's deletes a fine-tune) was a bare 405 for
    any id, without its key checked: a model not served is the 404 GET gives, a served one
    a 403 naming it, a wrong key the 401."""
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client.models.delete("tiny")
    assert caught.value.body["code"] == "model_not_deletable" and "'tiny'" in caught.value.body["message"]
    assert caught.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.delete("no-such-model")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0).models.delete("tiny")
    assert client.models.retrieve("tiny").id == "tiny"   # still served


def test_client_chat_whole_reply_has_usage_and_overhead_header(client):
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=ASK, max_tokens=8, temperature=0, seed=1, user="u1",
        metadata={"session_id": "s1"})
    reply = raw.parse()
    assert float(raw.headers["x-stepahead-overhead-ms"]) >= 0
    assert reply.model == "tiny" and reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens_details.cached_tokens is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_client_chat_stream_usage_only_when_asked(client):
    chunks = list(client.chat.completions.create(
        model="tiny", messages=ASK, max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 6
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens is not None
    assert all(c.usage is None for c in chunks[:-1])
    plain = list(client.chat.completions.create(model="tiny", messages=ASK, max_tokens=6,
                                                stream=True))
    assert all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason


def test_client_named_tool_choice_round_trip(client, gateway):
    first = client.chat.completions.create(
        model="tiny", messages=ASK, tools=[WEATHER, SEARCH], max_tokens=60, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    follow_up = ASK + [choice.message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": "12 C, rain"}]
    second = client.chat.completions.create(model="tiny", messages=follow_up,
                                            tools=[WEATHER, SEARCH], max_tokens=5, temperature=0)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # the second step re-sends the first: its prompt is served from the prefix cache
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    # the forced call counts as finished by "tool_calls" in the metrics too, as its reply says
    metrics = httpx.get(f"{gateway.base_url}/metrics", headers=gateway.headers("alpha")).text
    assert any(line.startswith("vllm:request_success_total") and 'finished_reason="tool_calls"' in line
               and 'model_name="tiny"' in line for line in metrics.splitlines())


def test_client_required_tool_choice_streams_openai_style_deltas(client):
    stream = client.chat.completions.create(
        model="tiny", messages=ASK, tools=[WEATHER, SEARCH], tool_choice="required",
        max_tokens=60, temperature=0, stream=True, stream_options={"include_usage": True})
    deltas = [c.choices[0].delta.tool_calls for c in stream if c.choices
              and c.choices[0].delta.tool_calls]
    head = deltas[0][0]
    assert head.index == 0 and head.id.startswith("call_") and head.type == "function"
    assert head.function.name in ("get_weather", "search")
    arguments = "".join(d[0].function.arguments or "" for d in deltas)
    assert isinstance(json.loads(arguments), dict)
    assert all(d[0].index == 0 and d[0].id in (None, head.id) for d in deltas)


class Forecast(pydantic.BaseModel):
    city: str
    days: int
    unit: typing.Literal["celsius", "fahrenheit"]


def test_client_parse_gives_a_reply_valid_against_the_pydantic_schema(client):
    """`response_format` json_schema, as the SDK's `parse` sends it (strict, from a
    pydantic model): the tiny model's random text cannot be JSON, so this is the
    leaf-filling path; the reply still parses into the model."""
    ask = [{"role": "user", "content": "Forecast for Oslo, 3 days."}]
    reply = client.chat.completions.parse(model="tiny", messages=ask, response_format=Forecast,
                                          max_tokens=80, temperature=0)
    choice = reply.choices[0]
    assert isinstance(choice.message.parsed, Forecast) and choice.finish_reason in ("stop", "length")
    assert json.loads(choice.message.content) == choice.message.parsed.model_dump()
    assert 0 < reply.usage.completion_tokens <= 80


class Visit(pydantic.BaseModel):
    place: str = pydantic.Field(min_length=2, max_length=30)
    day: datetime.date
    ticket: uuid.UUID
    guests: int = pydantic.Field(ge=1, le=8)


def test_client_parse_gives_typed_and_bounded_fields_their_values(client):
    """Dates, UUIDs, bounds and lengths: the tiny model's text fits none of them, so each
    is asked for and then takes a value inside its format or bounds; the SDK parses it."""
    ask = [{"role": "user", "content": "Plan a museum visit."}]
    reply = client.chat.completions.parse(model="tiny", messages=ask, response_format=Visit, max_tokens=80,
                                          temperature=0)
    visit = reply.choices[0].message.parsed
    assert isinstance(visit, Visit) and 1 <= visit.guests <= 8 and 2 <= len(visit.place) <= 30


def test_client_json_object_reply_streams_one_json_object(client):
    ask = [{"role": "user", "content": "Reply in JSON."}]
    chunks = list(client.chat.completions.create(model="tiny", messages=ask, max_tokens=20, stream=True,
                                                 response_format={"type": "json_object"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text), dict) and chunks[-1].choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as caught:  # OpenAI's rule: the messages say JSON
        client.chat.completions.create(model="tiny", messages=ASK, response_format={"type": "json_object"})
    assert caught.value.body["param"] == "messages"


def test_client_structured_reply_with_tools_offered_is_a_call_or_valid_json(client):
    schema = Forecast.model_json_schema()
    for seed in range(3):
        reply = client.chat.completions.create(
            model="tiny", messages=ASK, tools=[WEATHER], max_tokens=60, temperature=1.0, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "forecast", "schema": schema}})
        message = reply.choices[0].message
        if message.tool_calls:
            assert reply.choices[0].finish_reason == "tool_calls"
        else:
            Forecast.model_validate_json(message.content)
        assert reply.usage.completion_tokens <= 60


def test_client_chat_logprobs_whole_and_streamed(client):
    whole = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=6, temperature=0,
                                           logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    choice = whole.choices[0]
    entries = choice.logprobs.content
    assert len(entries) == whole.usage.completion_tokens == 6
    # a token may end inside a character: its bytes are exact, so together they spell the reply
    spelled = b"".join(bytes(e.bytes) for e in entries).decode("utf-8", errors="replace")
    assert spelled == choice.message.content
    for entry in entries:  # greedy: each token is the likeliest, alternatives sorted
        assert len(entry.top_logprobs) == 3
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (entry.token, entry.logprob)
        assert sum(math.exp(t.logprob) for t in entry.top_logprobs) <= 1 + 1e-6
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, max_tokens=6, temperature=0,
                                                 logprobs=True, stream=True, extra_body={"ignore_eos": True}))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in entries]
    assert all(e.top_logprobs == [] for e in streamed)
    plain = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_client_completion_logprobs_are_the_legacy_parallel_lists(client):
    reply = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5, temperature=0,
                                      logprobs=2, extra_body={"ignore_eos": True})
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert logprobs.text_offset == [sum(map(len, logprobs.tokens[:i])) for i in range(5)]
    assert all(len(top) <= 2 and max(top.values()) == pytest.approx(lp, abs=1e-4)
               for top, lp in zip(logprobs.top_logprobs, logprobs.token_logprobs))


@pytest.mark.parametrize("extra,param", [
    ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs=true
    ({"logprobs": True, "tools": [WEATHER]}, "logprobs"),
    ({"logprobs": True, "response_format": {"type": "json_object"}}, "logprobs"),
])
def test_client_logprobs_the_local_model_cannot_give_are_400(client, extra, param):
    ask = [{"role": "user", "content": "Say hi in JSON."}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=ask, max_tokens=2, **extra)
    assert caught.value.body["param"] == param


def test_client_tool_choice_none_gives_text(client):
    reply = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER],
                                           tool_choice="none", max_tokens=4)
    assert reply.choices[0].message.tool_calls is None


def test_client_completions_with_token_ids_and_text(client):
    by_ids = client.completions.create(model="tiny", prompt=[72, 105, 33], max_tokens=4,
                                       temperature=0)
    assert by_ids.usage.prompt_tokens == 3 and by_ids.choices[0].finish_reason
    by_text = client.completions.create(model="tiny", prompt="Hi!", max_tokens=4, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(by_text)
    assert chunks[-1].usage.completion_tokens <= 4


async def test_async_client_chat_and_stream(aclient):
    reply = await aclient.chat.completions.create(model="tiny", messages=ASK, max_tokens=4)
    assert reply.usage.completion_tokens <= 4
    stream = await aclient.chat.completions.create(model="tiny", messages=ASK, max_tokens=4,
                                                   stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    await aclient.close()


async def test_async_client_upstream_mock_and_fake(aclient):
    mock = await aclient.chat.completions.create(model="mock", messages=ASK)
    assert mock.choices[0].message.content == "Hello from the mock upstream"
    fake = await aclient.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "ping"}])
    assert fake.choices[0].message.content == "echo: ping"
    assert fake.usage.prompt_tokens_details.cached_tokens == 2
    stream = await aclient.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "ping pong"}], stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == ["echo:", "ping", "pong"]
    assert chunks[-1].usage.completion_tokens == 3
    await aclient.close()


def test_client_upstream_logprobs_reach_the_client_whole_and_streamed(client):
    ping = [{"role": "user", "content": "ping pong"}]
    whole = client.chat.completions.create(model="fake", messages=ping, logprobs=True, top_logprobs=1)
    entries = whole.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in entries] == [("echo: ", -0.5), ("ping ", -1.0), ("pong ", -1.5)]
    assert entries[1].bytes == list(b"ping ") and entries[1].top_logprobs[0].token == "ping "
    chunks = list(client.chat.completions.create(model="fake", messages=ping, logprobs=True, stream=True))
    streamed = [e.token for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert streamed == ["echo: ", "ping ", "pong "]


def test_client_upstream_tool_call_passthrough(client):
    whole = client.chat.completions.create(model="fake", messages=[
        {"role": "user", "content": "tool"}], tools=[SEARCH])
    [call] = whole.choices[0].message.tool_calls
    assert call.id == "call_fake1" and json.loads(call.function.arguments) == {"q": "x"}
    stream = client.chat.completions.create(model="fake", messages=[
        {"role": "user", "content": "tool"}], tools=[SEARCH], stream=True)
    chunks = [c for c in stream if c.choices]
    deltas = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert deltas[0].id == "call_fake1" and deltas[0].function.name == "lookup"
    assert "".join(d.function.arguments or "" for d in deltas) == '{"q": "x"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_client_errors_raise_typed_exceptions(client, gateway):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=ASK)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=ASK, n=0)
    assert caught.value.param == "n"
    bad = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="tiny", messages=ASK)


def test_client_n_choices_whole_and_streamed(client):
    whole = client.chat.completions.create(model="tiny", messages=ASK, n=3, max_tokens=6,
                                           temperature=1.0, seed=7)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts = [c.message.content for c in whole.choices]
    assert len(set(texts)) > 1  # a seed gives each choice its own draw
    again = client.chat.completions.create(model="tiny", messages=ASK, n=3, max_tokens=6,
                                           temperature=1.0, seed=7)
    assert [c.message.content for c in again.choices] == texts  # and the same draw next time
    assert whole.usage.completion_tokens <= 18 and whole.usage.completion_tokens >= 3
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, n=2, max_tokens=6, temperature=1.0,
                                                 seed=7, stream=True, stream_options={"include_usage": True}))
    streamed = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert set(finishes) == {0, 1} and not chunks[-1].choices
    assert streamed == {0: texts[0], 1: texts[1]}  # choice i draws with seed + i, streamed or not
    usage = chunks[-1].usage
    assert usage.prompt_tokens == whole.usage.prompt_tokens and 2 <= usage.completion_tokens <= 12


def test_client_completions_echo_the_prompt_before_the_completion(client):
    plain = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, temperature=0)
    echoed = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, temperature=0, echo=True, n=2)
    assert [c.text for c in echoed.choices] == ["Once upon" + plain.choices[0].text] * 2
    assert echoed.usage.completion_tokens == 2 * plain.usage.completion_tokens  # the echo is not generated
    completion = client.completions.create(model="tiny", prompt=[72, 105, 33], max_tokens=3, temperature=0)
    chunks = [chunk.choices[0].text for chunk in client.completions.create(
        model="tiny", prompt=[72, 105, 33], max_tokens=3, temperature=0, echo=True, stream=True) if chunk.choices]
    assert chunks[0] and "".join(chunks) == chunks[0] + completion.choices[0].text  # the decoded ids first


def test_client_completions_echo_with_logprobs_scores_the_prompt(client):
    # what evaluation harnesses send to score a continuation: the prompt's own log probabilities
    kwargs = dict(model="tiny", max_tokens=1, temperature=0, echo=True, logprobs=2)
    whole = client.completions.create(prompt="Once upon a time", **kwargs)
    context = client.completions.create(prompt="Once upon", **kwargs)
    plain = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=1, temperature=0, logprobs=2)
    choice = whole.choices[0]
    scores = choice.logprobs
    assert choice.text == "Once upon a time" + plain.choices[0].text
    assert len(scores.tokens) == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert scores.token_logprobs[0] is None and scores.top_logprobs[0] is None  # nothing before it
    assert all(value <= 0.0 for value in scores.token_logprobs[1:])
    assert all(len(top) >= 1 for top in scores.top_logprobs[1:])
    assert scores.token_logprobs[-1] == pytest.approx(plain.choices[0].logprobs.token_logprobs[0], abs=1e-4)
    num_context = context.usage.prompt_tokens  # the shared prefix scores the same either way
    assert scores.token_logprobs[1:num_context] == pytest.approx(context.choices[0].logprobs.token_logprobs[1:num_context],
                                                                 abs=1e-4)
    assert scores.text_offset[0] == 0 and scores.text_offset == sorted(scores.text_offset)
    chunks = [c.choices[0] for c in client.completions.create(prompt="Once upon a time", stream=True, **kwargs)
              if c.choices]
    assert chunks[0].text == "Once upon a time"
    streamed = chunks[0].logprobs.token_logprobs  # the prompt's, with the echo
    assert streamed[0] is None and len(streamed) == whole.usage.prompt_tokens
    assert streamed[1:] == pytest.approx(scores.token_logprobs[1:whole.usage.prompt_tokens], abs=1e-4)


def test_client_completions_take_several_prompts(client):
    kwargs = dict(model="tiny", max_tokens=4, temperature=0)
    alone = [client.completions.create(prompt=p, **kwargs) for p in ("Once upon", "Hello there")]
    both = client.completions.create(prompt=["Once upon", "Hello there"], n=2, **kwargs)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]  # prompt i's choices are 2i, 2i + 1
    assert [c.text for c in both.choices] == [alone[0].choices[0].text] * 2 + [alone[1].choices[0].text] * 2
    assert both.usage.prompt_tokens == alone[0].usage.prompt_tokens + alone[1].usage.prompt_tokens
    assert both.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    ids = client.completions.create(prompt=[[72, 105], [33, 34, 35]], **kwargs)
    assert [c.index for c in ids.choices] == [0, 1] and ids.usage.prompt_tokens == 5
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(prompt=["Once upon", "Hello there"], stream=True, **kwargs):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    assert streamed == {0: alone[0].choices[0].text, 1: alone[1].choices[0].text}
    best = client.completions.create(prompt=["Once upon", "Hello there"], best_of=3, temperature=1.0, seed=1,
                                      model="tiny", max_tokens=4)
    assert [c.index for c in best.choices] == [0, 1]
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(prompt=["a"] * 3, n=50, **kwargs)  # 150 completions
    assert caught.value.param == "prompt"


def test_client_completions_best_of_returns_the_likeliest_candidates(client):
    kwargs = dict(model="tiny", prompt="Once upon", max_tokens=5, temperature=1.0, seed=3)
    candidates = client.completions.create(n=4, logprobs=0, **kwargs)
    best = client.completions.create(best_of=4, n=2, **kwargs)
    scored = client.completions.create(best_of=4, logprobs=0, **kwargs)

    def per_token(choice):
        values = choice.logprobs.token_logprobs
        return sum(values) / len(values)

    ranked = sorted(candidates.choices, key=lambda c: (-per_token(c), c.index))
    assert [c.text for c in best.choices] == [c.text for c in ranked[:2]]  # the same draws, ranked
    assert [c.index for c in best.choices] == [0, 1] and all(c.logprobs is None for c in best.choices)
    assert scored.choices[0].text == ranked[0].text and scored.choices[0].logprobs is not None
    # every candidate's tokens are billed, as OpenAI bills best_of
    assert best.usage.completion_tokens == candidates.usage.completion_tokens


def test_client_completions_and_upstream_models_take_n(client):
    completion = client.completions.create(model="tiny", prompt="Once upon", n=2, max_tokens=4, temperature=0)
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.choices[0].text == completion.choices[1].text  # greedy: the same text twice
    upstream = client.chat.completions.create(model="fake", messages=ASK, n=2)
    assert [c.index for c in upstream.choices] == [0, 1] and all(c.message.content for c in upstream.choices)


def test_client_service_tier_flex_is_served_in_the_flex_tier_and_named_in_the_reply(client, gateway):
    def num_routed_flex() -> int:
        text = httpx.get(f"{gateway.base_url}/metrics", headers=gateway.headers("ops")).text
        found = re.search(r'stepahead_router_counts_total\{model_name="tiny",field="num_routed_flex"\} (\d+)', text)
        return int(found.group(1)) if found else 0

    before = num_routed_flex()
    plain = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4, service_tier="auto")
    assert plain.service_tier == "default" and num_routed_flex() == before
    flex = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4, service_tier="flex")
    assert flex.service_tier == "flex"
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4, stream=True,
                                                 service_tier="flex"))
    assert {chunk.service_tier for chunk in chunks} == {"flex"}
    response = client.responses.create(model="tiny", input="Hi", max_output_tokens=4, service_tier="flex")
    assert response.service_tier == "flex"
    client.completions.create(model="tiny", prompt="Once", max_tokens=2, extra_body={"service_tier": "flex"})
    assert num_routed_flex() == before + 4   # the engine's router took each as flex work
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=ASK, service_tier="turbo")
    assert caught.value.param == "service_tier"


def test_a_flex_tenant_is_served_in_the_flex_tier_whatever_it_asks(gateway):
    offline = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["offline"], max_retries=0)
    chat = offline.chat.completions.create(model="tiny", messages=ASK, max_tokens=2, service_tier="default")
    response = offline.responses.create(model="tiny", input="Hi", max_output_tokens=2)
    assert (chat.service_tier, response.service_tier) == ("flex", "flex")
    upstream = offline.responses.create(model="mock", input="Hi", service_tier="default")
    assert upstream.service_tier == "default"   # an upstream model gets the tier the client sent


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_streamed_forced_call_has_null_content_as_the_whole_reply_has(client, tool_choice):
    chunks = list(client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER], tool_choice=tool_choice,
                                                 max_tokens=12, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content is None
    assert all(chunk.choices[0].delta.content is None for chunk in chunks if chunk.choices)
    with client.chat.completions.stream(model="tiny", messages=ASK, tools=[WEATHER], tool_choice=tool_choice,
                                        max_tokens=12) as stream:
        message = stream.get_final_completion().choices[0].message
    whole = client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER], tool_choice=tool_choice,
                                           max_tokens=12).choices[0].message
    assert message.content is None and whole.content is None and message.tool_calls and whole.tool_calls
    text = list(client.chat.completions.create(model="tiny", messages=ASK, max_tokens=2, stream=True))
    assert text[0].choices[0].delta.content == ""   # a text reply opens with "", as OpenAI's do
