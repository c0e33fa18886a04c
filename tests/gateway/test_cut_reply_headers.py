"""A request the shutdown cuts before its answer began leaves its headers for the 503
(gateway/fast_paths.py): whole replies (QA137 #2) and streams before their first event
(QA142 #1) alike; other failures leave none."""
import asyncio
from types import SimpleNamespace

import pytest

from gateway.errors import CUT_REPLY_HEADERS, ApiError
from gateway.respond import _leave_cut_headers
from gateway.responses_format import ResponsesRequest
from gateway.schemas import validate


class _Exchange:
    def overhead_s(self) -> float:
        return 0.001

    def reply_headers(self, overhead_s: float) -> dict[str, str]:
        return {"x-request-id": "resp_1", "x-session-id": "s", "x-ratelimit-remaining-requests": "4"}


def test_a_cut_leaves_the_requests_headers_and_other_failures_none():
    cut = SimpleNamespace(scope={})
    _leave_cut_headers(cut, _Exchange(), asyncio.CancelledError())
    assert cut.scope[CUT_REPLY_HEADERS]["x-request-id"] == "resp_1"
    failed = SimpleNamespace(scope={})
    _leave_cut_headers(failed, _Exchange(), ApiError(400, "no", "invalid_request_error", None, None))
    assert CUT_REPLY_HEADERS not in failed.scope


@pytest.mark.parametrize("field, value, code", [("temperature", 5, "decimal_above_max_value"),
                                                ("top_p", 3, "decimal_above_max_value"),
                                                ("temperature", -1, "decimal_below_min_value")])
def test_a_responses_request_out_of_range_is_no_valid_request(field, value, code):
    """QA142 #2, #3: its range was checked only as the chat body it runs as, so it was a
    traced failed step (and input_tokens counted it against requests_per_minute)."""
    with pytest.raises(ApiError) as refused:
        validate(ResponsesRequest, {"model": "m", "input": "hi", field: value})
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, field, code)
