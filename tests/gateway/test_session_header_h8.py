"""QA65 D4: a long `metadata.session_id` names the session cut as the trace
store keeps ids (first 256 characters), so the answer's `x-session-id` stays a few KB
however long the id came (at most 256 characters × 12 for 4-byte UTF-8 as `%XX`), and
sent back it names the same session."""
import pytest

from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from agents_trace.header_ids import decode_header_id, encode_header_id
from tests.gateway.test_http_errors import post

BODY = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("session", ["é" * 500, "😀" * 400])   # metadata values are 512 characters at most
def test_a_long_client_session_id_gives_a_bounded_header_that_names_the_same_session(gateway, session):
    answer = post(gateway, {**BODY, "metadata": {"session_id": session}})
    assert answer.status_code == 200, answer.text
    header = answer.headers["x-session-id"]
    assert header == encode_header_id(session[:MAX_CLIENT_ID_CHARS])
    assert decode_header_id(header) == session[:256] and len(header) <= 12 * 256
    again = post(gateway, BODY, headers={**gateway.headers(), "x-session-id": header})
    assert again.status_code == 200 and again.headers["x-session-id"] == header
