"""Every answer of a traced step names its session (`x-session-id`), a failed one too."""
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
    from agents_trace.store_queries import find_session, list_steps

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
