"""QA154 finding 3: `reasoning.effort` and `reasoning.summary` took any string and echoed
it, so a typo ("hihg") was answered 200 with a response object the openai SDK's
`Response` model refuses. A value outside OpenAI's (the SDK's literals) is a 400
`invalid_value` naming it, as at OpenAI; null is still none. Chat's `reasoning_effort`
is unchanged: documented as any string, sent on to upstream models as it is."""
from typing import get_args

import httpx
import pytest
from openai.types.responses import Response
from openai.types.shared import Reasoning

from gateway.errors import ApiError
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_objects import response_object
from gateway.schemas import validate


def _request(**fields) -> ResponsesRequest:
    return validate(ResponsesRequest, {"model": "m", "input": "x", **fields})


def _literals(field: str) -> tuple[str, ...]:
    """The values the installed SDK's `Reasoning.<field>` takes (its Optional[Literal])."""
    annotation = Reasoning.model_fields[field].annotation
    while not all(isinstance(arg, str) for arg in get_args(annotation)):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return get_args(annotation)


@pytest.mark.parametrize("field", ["effort", "summary", "generate_summary"])
def test_the_values_are_the_openai_sdks(field):
    from gateway.responses_chat_fields import REASONING_VALUES
    assert set(REASONING_VALUES[field]) == set(_literals(field))


@pytest.mark.parametrize("reasoning, param", [
    ({"effort": "hihg"}, "reasoning.effort"),
    ({"effort": "HIGH"}, "reasoning.effort"),
    ({"effort": ""}, "reasoning.effort"),
    ({"effort": "low", "summary": "verbose"}, "reasoning.summary"),
    ({"generate_summary": "short"}, "reasoning.generate_summary"),
])
def test_a_value_openai_does_not_know_is_a_400_naming_it(reasoning, param):
    with pytest.raises(ApiError) as raised:
        to_chat_body(_request(reasoning=reasoning))
    error = raised.value
    assert (error.status, error.code, error.param, error.type) == (400, "invalid_value", param,
                                                                   "invalid_request_error")
    assert error.message.startswith(f"Invalid value: {reasoning[param.split('.')[1]]!r}. Supported values are: ")


@pytest.mark.parametrize("reasoning", [
    {"effort": effort, "summary": summary} for effort in (*_literals("effort"), None)
    for summary in (*_literals("summary"), None)] + [{"generate_summary": "concise"}, {}])
def test_each_openai_value_is_echoed_into_a_response_the_sdk_takes(reasoning):
    request = _request(reasoning=reasoning)
    to_chat_body(request)   # no 400
    echoed = response_object("resp_1", request)["reasoning"]
    assert echoed == {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
    assert Response.model_validate(response_object("resp_1", request)).reasoning.effort == reasoning.get("effort")


def test_over_http_the_typo_is_refused_before_anything_runs(gateway):
    answer = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("alpha"), timeout=30,
                        json={"model": "tiny", "input": "Hi", "max_output_tokens": 2,
                              "reasoning": {"effort": "hihg", "summary": "auto"}})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == {"message": "Invalid value: 'hihg'. Supported values are: 'none', 'minimal', "
                                                 "'low', 'medium', 'high', 'xhigh', 'max'.",
                                      "type": "invalid_request_error", "param": "reasoning.effort",
                                      "code": "invalid_value"}
