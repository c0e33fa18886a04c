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
