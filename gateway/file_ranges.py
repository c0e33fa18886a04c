"""A file's bytes as a `Range` header asks for them (GET /v1/files/{id}/content).

`byte_ranges(header, size)` reads the header (RFC 9110 §14.1-14.2); `RangedFile` serves the
file for that reading. Invariants (with an `If-Range` that does not match the file, the
Range is ignored):
- a Range the gateway cannot honour as written is ignored and the whole file is sent (200),
  as RFC 9110 allows: another unit than `bytes`, a range-set that does not parse, an
  int-range whose last position is before its first (`bytes=5-2`);
- a valid `bytes` Range none of whose ranges lies in the file (`bytes=100000-` on a
  shorter file, `bytes=-0`, any range of an empty file) is a 416 in OpenAI's error shape
  with `Content-Range: bytes */SIZE`, never a bare text answer;
- otherwise the satisfiable ranges, and only those, are sent (206; Starlette's
  FileResponse writes them, one range or multipart; past 100 ranges it sends the whole
  file), each clipped to the file's end.
"""
from __future__ import annotations

import os

from starlette.datastructures import Headers
from starlette.responses import FileResponse, JSONResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import ApiError

IGNORED = None   # byte_ranges: the header says nothing the gateway honours: send the whole file
MAX_POSITION_DIGITS = 18   # a longer position lies past any file (and int() of thousands of digits raises)


def _position(digits: str) -> int:
    return int(digits) if len(digits) <= MAX_POSITION_DIGITS else 10 ** MAX_POSITION_DIGITS


def byte_ranges(header: str | None, size: int) -> list[tuple[int, int]] | None:
    """The satisfiable ranges of a `Range` header, as (first, last) byte positions, last
    included and below `size`; [] for a valid header none of whose ranges is satisfiable
    (a 416); `IGNORED` (None) for no header or one to ignore. Empty list elements
    (`bytes=0-1,,2-3`) are skipped, as RFC 9110's list rule says."""
    if header is None:
        return IGNORED
    unit, equals, range_set = header.partition("=")
    if not equals or unit.strip().lower() != "bytes":
        return IGNORED
    specs = [spec.strip() for spec in range_set.split(",") if spec.strip()]
    if not specs:
        return IGNORED
    ranges: list[tuple[int, int]] = []
    for spec in specs:
        first_text, dash, last_text = spec.partition("-")
        first_text, last_text = first_text.strip(), last_text.strip()
        if not dash or not (first_text or last_text) \
                or not all(part.isascii() and part.isdigit() for part in (first_text, last_text) if part):
            return IGNORED   # not an int-range nor a suffix-range
        if not first_text:   # a suffix: the last N bytes
            length = _position(last_text)
            if length > 0 and size > 0:
                ranges.append((max(0, size - length), size - 1))
            continue
        first = _position(first_text)
        last = _position(last_text) if last_text else size - 1
        if last_text and last < first:
            return IGNORED   # an invalid int-range
        if first < size:
            ranges.append((first, min(last, size - 1)))
    return ranges


def range_not_satisfiable(size: int) -> ApiError:
    return ApiError(416, f"The requested range is not satisfiable: the file has {size} bytes.",
                    "invalid_request_error", "range_not_satisfiable", None, {"Content-Range": f"bytes */{size}"})


class RangedFile(FileResponse):
    """A FileResponse (made with the file's `stat_result`) that answers the request's Range
    as `byte_ranges` reads it, when an `If-Range` the request may carry matches the file
    (else the whole file, as Starlette does). NOTE: Starlette reads the Range from the
    scope, so the scope it is given carries the satisfiable ranges, written plainly."""

    def __init__(self, path: str | os.PathLike[str], *, stat_result: os.stat_result, **kwargs) -> None:
        super().__init__(path, stat_result=stat_result, **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_headers = Headers(scope=scope)
        if_range = request_headers.get("if-range")
        is_current = if_range is None or (not if_range.startswith("W/")
                                          and if_range in (self.headers.get("etag"), self.headers.get("last-modified")))
        ranges = byte_ranges(request_headers.get("range"), self.stat_result.st_size) if is_current else IGNORED
        if ranges == []:
            error = range_not_satisfiable(self.stat_result.st_size)
            await JSONResponse(error.body(), error.status, headers=error.headers)(scope, receive, send)
            return
        headers = [(name, value) for name, value in scope.get("headers", ()) if name != b"range"]
        if ranges:
            headers.append((b"range", ("bytes=" + ",".join(f"{first}-{last}" for first, last in ranges)
                                       ).encode("ascii")))
        await super().__call__({**scope, "headers": headers}, receive, send)
