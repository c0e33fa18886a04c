"""An error a Responses request's run raises once its reply began is named as the
Responses API names things, like the checks' errors before it (gateway/responses_errors.py)."""
import pytest

from gateway.backend import TextDelta
from gateway.errors import ApiError
from gateway.responses_errors import ErrorsRenamed


class FailingBackend:
    model_id = "m"

    def __init__(self) -> None:
        self.closed = False

    async def run(self, prepared):
        try:
            yield TextDelta("{")
            raise ApiError(400, "The JSON Schema's smallest valid value is too large to write.",
                           "invalid_request_error", "invalid_value", "response_format.json_schema.schema")
        finally:
            self.closed = True


async def test_a_run_error_names_the_responses_parameter_and_the_run_is_closed():
    inner = FailingBackend()
    backend = ErrorsRenamed(inner, sources=[("input[0]",)])
    seen = []
    with pytest.raises(ApiError) as caught:
        async for event in backend.run(None):
            seen.append(event)
    assert [event.text for event in seen] == ["{"]
    assert caught.value.param == "text.format.schema" and caught.value.status == 400
    assert inner.closed and backend.model_id == "m"   # the rest is the backend's own


async def test_a_run_left_early_closes_the_backends_run():
    inner = FailingBackend()
    events = ErrorsRenamed(inner, sources=[]).run(None)
    assert isinstance(await events.__anext__(), TextDelta)
    await events.aclose()
    assert inner.closed
