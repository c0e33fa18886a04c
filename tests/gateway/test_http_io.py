"""Reading request bodies: a multipart upload sent in chunks, without a Content-Length,
is read no further than its limit (it used to be spooled to disk whole, then refused)."""
import asyncio

import pytest
from starlette.requests import Request

from gateway.errors import ApiError
from gateway.http_io import limited_body

CHUNK = b"x" * 65536


def _chunked_upload(num_chunks: int) -> tuple[Request, list[int]]:
    """A multipart request whose file part is `num_chunks` chunks; the list counts the
    chunks read."""
    head = (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n")
    read = [0]

    async def receive() -> dict:
        read[0] += 1
        if read[0] == 1:
            return {"type": "http.request", "body": head, "more_body": True}
        if read[0] <= num_chunks + 1:
            return {"type": "http.request", "body": CHUNK, "more_body": True}
        return {"type": "http.request", "body": b"\r\n--B--\r\n", "more_body": False}
    scope = {"type": "http", "method": "POST", "path": "/v1/files", "headers": [
        (b"content-type", b"multipart/form-data; boundary=B"), (b"transfer-encoding", b"chunked")]}
    return Request(scope, receive), read


def test_a_chunked_upload_past_the_limit_is_a_413_once_the_limit_is_read():
    request, read = _chunked_upload(num_chunks=1000)   # 64 MiB sent
    async def main():
        await limited_body(request, 4 * len(CHUNK)).form()
    with pytest.raises(ApiError) as refused:
        asyncio.run(main())
    assert refused.value.status == 413 and read[0] == 5   # the head, then chunks until past the limit (the 4th)


def test_an_upload_within_the_limit_is_read_whole():
    request, _ = _chunked_upload(num_chunks=3)

    async def main():
        form = await limited_body(request, 4 * len(CHUNK)).form()
        try:
            return await form["file"].read()
        finally:
            await form.close()
    assert asyncio.run(main()) == CHUNK * 3
