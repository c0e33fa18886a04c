"""Every answer of a traced step names its session (`x-session-id`), a failed one too; the
step of a request its client left records what was known when it ended."""
import json

import pytest

from tests.gateway.test_http_errors import assert_error, post


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_an_error_answer_of_a_traced_step_names_its_session(gateway, model):
    headers = {**gateway.headers(), "x-session-id": f"failing-{model}"}
    chat = post(gateway, {"model": model, "messages": [{"role": "user", "content": "status:500"}]},
                headers=headers)
    assert_error(chat, 502)
    assert chat.headers["x-session-id"] == f"failing-{model}" and chat.headers["x-request-id"].startswith("chatcmpl")
    responses = post(gateway, {"model": model, "input": "status:500"}, path="/v1/responses", headers=headers)
    assert_error(responses, 502)
    assert responses.headers["x-session-id"] == f"failing-{model}"


def test_an_error_before_the_step_is_traced_names_no_session(gateway):
    answer = post(gateway, {"model": "fake", "messages": "not a list"})
    assert_error(answer, 400)
    assert "x-session-id" not in answer.headers


@pytest.mark.parametrize("name", ["café-1", "50% done, now"])
def test_a_session_id_sent_raw_then_as_answered_then_raw_again_is_one_session(gateway, name):
    """An answer's `x-session-id` is percent-encoded past printable ASCII and `%`; sent
    back, it names the same session, and a raw UTF-8 header is read as UTF-8."""
    import uuid

    from agents_trace.header_ids import encode_header_id
    from agents_trace.store_queries import find_session
    from agents_trace.step_queries import list_steps

    session = f"{name}-{uuid.uuid4().hex[:6]}"
    body = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    auth = gateway.headers()["Authorization"].encode()

    def chat(session_header: bytes) -> str:
        answer = post(gateway, body, headers={b"authorization": auth, b"x-session-id": session_header,
                                              b"x-agent-name": "agent é".encode()})
        assert answer.status_code == 200, answer.text
        return answer.headers["x-session-id"]

    answered = chat(session.encode("utf-8"))
    assert answered == encode_header_id(session) != session   # percent-encoded: printable ASCII only
    assert chat(answered.encode("ascii")) == answered
    assert chat(session.encode("utf-8")) == answered
    assert gateway.state.tracer.flush(15)
    store = gateway.state.tracer.store_path
    [found] = find_session(store, session, "alpha")
    assert found["num_steps"] == 3 and found["agent"] == "agent é"
    assert len(list_steps(store, "alpha", session)["data"]) == 3


STORY = {"model": "tiny", "max_tokens": 4000, "temperature": 1.0, "ignore_eos": True,
         "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper. " * 6}]}


async def _cut_step(gateway, session: str, *, stream: bool, n: int = 1) -> tuple[dict, dict | None, list[str]]:
    """Ask for a long reply in `session` (content captured; `n` choices), leave after a few
    chunks (a stream) or half a second (a whole reply); the traced step, its content, and
    the text the client got of each choice."""
    import asyncio
    import time

    import httpx

    from agents_trace.step_queries import list_steps, step_content

    tracer = gateway.state.tracer
    headers = {**gateway.headers(), "x-session-id": session}
    received = [""] * n
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        warm = await client.post("/v1/chat/completions", headers={**headers, "x-session-id": f"{session}-warm"},
                                 json=dict(STORY, max_tokens=1))   # the prompt in a worker's prefix cache
        assert warm.status_code == 200, warm.text
        if stream:
            async with client.stream("POST", "/v1/chat/completions", headers=headers,
                                     json=dict(STORY, stream=True, n=n)) as response:
                assert response.status_code == 200
                lines, num_texts = response.aiter_lines(), 0
                while num_texts < 6 * n:
                    line = await anext(lines)
                    if line.startswith("data: {"):
                        [choice] = json.loads(line[6:])["choices"]
                        received[choice["index"]] += choice["delta"].get("content") or ""
                        num_texts += bool(choice["delta"].get("content"))
        else:
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/v1/chat/completions", headers=headers, json=STORY, timeout=0.5)
    deadline_s = time.monotonic() + 15
    while not (steps := list_steps(tracer.store_path, "alpha", session)["data"]):
        assert time.monotonic() < deadline_s, "the cut step was not traced"
        tracer.flush(1)
        await asyncio.sleep(0.05)
    (step,) = steps
    return step, step_content(tracer.store_path, "alpha", session, 0), received


async def test_a_stream_its_client_cut_is_traced_with_what_it_had_sent(gateway, monkeypatch):
    """The step of a stream its client left keeps what its first token told (the worker, the
    prompt tokens it found cached), the tokens generated, the text the client was sent
    (content on) and says where it was cut (the viewer shows `error: message`)."""
    monkeypatch.setattr(gateway.state.tracer, "captures_content", True)
    step, content, [received] = await _cut_step(gateway, "cut-stream-traced", stream=True)
    assert step["error"] == "client_closed" and step["ttft_s"] is not None
    assert step["worker"] in ("w0", "w1") and 0 < step["num_cached_tokens"] < step["num_input_tokens"]
    assert step["num_output_tokens"] >= 6   # the text chunks the client read, at least
    assert step["error_message"] == ("The client closed the connection while the reply was streaming, "
                                     f"{step['num_output_tokens']} output tokens generated.")
    output = content["output"]
    assert output["role"] == "assistant" and output["content"].startswith(received) and received


async def test_a_cut_stream_of_several_choices_keeps_every_choice_it_had_sent(gateway, monkeypatch):
    """Known failure: a cut stream with `n > 1` recorded choice 0 only (no `other_choices`,
    no other outputs). Each choice keeps what its client was sent, unfinished (no finish
    reason, as choice 0)."""
    monkeypatch.setattr(gateway.state.tracer, "captures_content", True)
    step, content, received = await _cut_step(gateway, "cut-stream-two-choices", stream=True, n=2)
    first, second = received
    assert step["error"] == "client_closed" and first and second
    assert step["finish_reason"] is None and step["other_choices"] == [{"finish_reason": None, "tool_calls": []}]
    assert content["output"]["content"].startswith(first)
    [other] = content["other_outputs"]
    assert other["role"] == "assistant" and other["content"].startswith(second)


async def test_a_whole_reply_its_client_left_is_traced_with_nothing_sent(gateway, monkeypatch):
    monkeypatch.setattr(gateway.state.tracer, "captures_content", True)
    step, content, _ = await _cut_step(gateway, "cut-whole-traced", stream=False)
    assert step["error"] == "client_closed" and step["num_output_tokens"] > 0
    assert step["worker"] in ("w0", "w1") and 0 < step["num_cached_tokens"] < step["num_input_tokens"]
    assert step["error_message"] == ("The client closed the connection before the reply was sent, "
                                     f"{step['num_output_tokens']} output tokens generated.")
    assert content["output"] is None   # generated, never sent
