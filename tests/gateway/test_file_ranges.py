"""`Range` on GET /v1/files/{id}/content: a header that cannot be read is ignored (the
whole file, 200), one outside the file an OpenAI-shaped 416 with `Content-Range: bytes */SIZE`,
a satisfiable one its bytes (206)."""
import httpx
import pytest

from gateway.file_ranges import IGNORED, byte_ranges
from tests.gateway.test_http_errors import assert_error

CONTENT = b"0123456789abcdefghij"   # 20 bytes


@pytest.mark.parametrize("header, ranges", [
    (None, IGNORED), ("bytes=abc", IGNORED), ("items=0-1", IGNORED), ("bytes=5-2", IGNORED),
    ("bytes", IGNORED), ("bytes=", IGNORED), ("bytes=1-2,x", IGNORED), ("bytes=--1", IGNORED),
    ("bytes=0x1-2", IGNORED), ("bytes=\u0661-2", IGNORED),   # digits are ASCII digits
    ("bytes=100000-", []), ("bytes=20-25", []), ("bytes=-0", []), ("bytes=99999999999999999999999999-", []),
    ("bytes=0-4", [(0, 4)]), ("BYTES = 0-4", [(0, 4)]), ("bytes=15-", [(15, 19)]), ("bytes=-5", [(15, 19)]),
    ("bytes=-500", [(0, 19)]), ("bytes=10-1000", [(10, 19)]), ("bytes=0-1, ,100-200, 3-4", [(0, 1), (3, 4)]),
    ("bytes=-" + "9" * 5000, [(0, 19)]),
])
def test_byte_ranges_reads_a_header_against_a_file_size(header, ranges):
    assert byte_ranges(header, len(CONTENT)) == ranges


def test_every_range_of_an_empty_file_is_unsatisfiable():
    assert byte_ranges("bytes=0-", 0) == [] and byte_ranges("bytes=-1", 0) == []


@pytest.fixture(scope="module")
def uploaded(gateway):
    answer = httpx.post(f"{gateway.base_url}/v1/files", headers=gateway.headers(), timeout=30,
                        files={"file": ("r.txt", CONTENT)}, data={"purpose": "user_data"})
    assert answer.status_code == 200, answer.text
    return f"{gateway.base_url}/v1/files/{answer.json()['id']}/content"


def _get(gateway, url, range_header, **headers):
    return httpx.get(url, headers={**gateway.headers(), "range": range_header, **headers}, timeout=30)


@pytest.mark.parametrize("range_header", ["bytes=abc", "items=0-1", "bytes=5-2", "bytes=", "bytes=1-2,junk"])
def test_a_range_that_cannot_be_read_is_ignored_and_the_whole_file_sent(gateway, uploaded, range_header):
    answer = _get(gateway, uploaded, range_header)
    assert answer.status_code == 200 and answer.content == CONTENT
    assert "content-range" not in answer.headers


@pytest.mark.parametrize("range_header", ["bytes=100000-", "bytes=20-", "bytes=-0", "bytes=30-40,50-"])
def test_a_range_outside_the_file_is_an_openai_shaped_416(gateway, uploaded, range_header):
    answer = _get(gateway, uploaded, range_header)
    assert_error(answer, 416, code="range_not_satisfiable")
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["content-range"] == f"bytes */{len(CONTENT)}"


def test_a_satisfiable_range_gets_its_bytes_and_an_unsatisfiable_part_is_dropped(gateway, uploaded):
    one = _get(gateway, uploaded, "bytes=2-5")
    assert one.status_code == 206 and one.content == CONTENT[2:6]
    assert one.headers["content-range"] == f"bytes 2-5/{len(CONTENT)}"
    tail = _get(gateway, uploaded, "bytes=-3")
    assert tail.status_code == 206 and tail.content == CONTENT[-3:]
    partly = _get(gateway, uploaded, "bytes=18-100, 500-600")   # the part past the end is dropped
    assert partly.status_code == 206 and partly.content == CONTENT[18:]
    assert partly.headers["content-range"] == f"bytes 18-19/{len(CONTENT)}"
    several = _get(gateway, uploaded, "bytes=0-1,4-5")
    assert several.status_code == 206 and several.headers["content-type"].startswith("multipart/byteranges")


def test_an_if_range_that_does_not_match_sends_the_whole_file_even_for_a_range_outside_it(gateway, uploaded):
    answer = _get(gateway, uploaded, "bytes=100000-", **{"if-range": '"not-the-etag"'})
    assert answer.status_code == 200 and answer.content == CONTENT
    etag = httpx.get(uploaded, headers=gateway.headers(), timeout=30).headers["etag"]
    assert _get(gateway, uploaded, "bytes=100000-", **{"if-range": etag}).status_code == 416
    matching = _get(gateway, uploaded, "bytes=0-0", **{"if-range": etag})
    assert matching.status_code == 206 and matching.content == CONTENT[:1]
