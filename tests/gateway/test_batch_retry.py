import httpx
import pytest

from gateway.batch_retry import is_final_refusal, retry_wait_s


@pytest.mark.parametrize("status_code", [200, 400, 401, 404, 500, 502])
def test_only_429_and_503_are_retried(status_code):
    assert retry_wait_s(status_code, httpx.Headers({"retry-after": "2"}), {}) is None


def test_a_line_on_a_conversation_another_response_runs_on_waits_a_second_and_goes_again():
    """QA112: batch lines naming one conversation met `conversation_locked` (it takes one
    response at a time) and had it as their final result."""
    locked = {"error": {"code": "conversation_locked", "param": "conversation", "message": "..."}}
    assert retry_wait_s(400, httpx.Headers(), locked) == 1.0
    assert retry_wait_s(400, httpx.Headers(), {"error": {"code": "invalid_value"}}) is None


@pytest.mark.parametrize("headers, wait_s", [
    ({"retry-after": "2.5"}, 2.5), ({}, 1.0), ({"retry-after": "soon"}, 1.0), ({"retry-after": "0"}, 0.1),
    ({"retry-after": "-4"}, 1.0), ({"retry-after": "3600"}, 3600.0)])   # a negative wait: unreadable (QA226 F5)
def test_the_wait_is_retry_after_or_one_second_and_never_under_a_tenth(headers, wait_s):
    assert retry_wait_s(429, httpx.Headers(headers), {}) == wait_s
    assert retry_wait_s(503, httpx.Headers(headers), None) == wait_s


def test_a_refusal_that_says_not_to_retry_or_a_spent_budget_is_final():
    assert is_final_refusal(httpx.Headers({"x-should-retry": " False "}), {})
    assert is_final_refusal(httpx.Headers(), {"error": {"code": "insufficient_quota"}})
    assert not is_final_refusal(httpx.Headers({"x-should-retry": "true"}), {"error": {"code": "rate_limit_exceeded"}})
    assert not is_final_refusal(httpx.Headers(), {"error": "insufficient_quota"})
    assert retry_wait_s(429, httpx.Headers({"x-should-retry": "false", "retry-after": "1"}), {}) is None
    assert retry_wait_s(429, httpx.Headers(), {"error": {"code": "insufficient_quota"}}) is None
