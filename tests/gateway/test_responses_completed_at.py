"""A Responses reply's `completed_at` is when its last event was made (`Finished.ended_at`),
in every copy of it: the stored row is written before the end is answered, and each copy
was stamped with the time it was built, so a slow write gave the answer a later
`completed_at` than the stored one (QA128, left in session 53)."""
import json

from gateway.backend import Finished, TextDelta, Usage
from gateway.collected import Collected
from gateway.responses_format import ResponsesRequest
from gateway.responses_stream import ResponsesStreamWriter, whole_response

REQUEST = ResponsesRequest(model="m", input="x")
ENDED_AT = 1_700_000_000.75


def test_the_whole_response_and_the_streamed_end_say_when_the_reply_ended():
    end = Finished("stop", Usage(3, 2), ended_at=ENDED_AT)
    collected = Collected()
    for event in (TextDelta("hi"), end):
        collected.add(event)
    assert whole_response("resp_1", REQUEST, collected, created_at=1)["completed_at"] == 1_700_000_000
    writer = ResponsesStreamWriter("resp_1", REQUEST, created_at=1)
    raw = writer.opening() + writer.event(TextDelta("hi")) + writer.event(end)
    [completed] = [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n")
                   if line.startswith(b"data: ") and b'"response.completed"' in line]
    assert completed["response"]["completed_at"] == 1_700_000_000


def test_a_finish_is_stamped_as_it_is_made_and_the_stamp_is_not_compared():
    first, second = Finished("stop", Usage(1, 1), ended_at=1.0), Finished("stop", Usage(1, 1), ended_at=2.0)
    assert first == second
    assert Finished("stop", Usage(1, 1)).ended_at > ENDED_AT
