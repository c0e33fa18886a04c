"""A Batch API input file read into its requests, checked as OpenAI checks it.

Invariants: a file with any bad line gives no requests, only errors (the batch fails
whole, before anything runs); each error names its line (from 1) and what is wrong, at
most `MAX_ERRORS` of them, the first bad lines: past that, every line is still checked and
the last error listed says how many more are bad (OpenAI's `errors` object has no field
for it; QA212 F1); every request kept has a unique non-empty `custom_id`, method
POST, the batch's endpoint as `url`, a JSON object `body` that does not ask to stream or
to run in the background (its result would be the queued response, not the answer), and
names the model the first good request names (a batch runs one model, as at OpenAI);
a line meets the JSON checks of a direct request's body (gateway/http_io.py): its body
nests at most `MAX_JSON_DEPTH` deep (so it can be walked and re-encoded recursively) and
no string in it holds an unpaired UTF-16 surrogate (so every string has a UTF-8 form, and
its result can be written).
"""
from __future__ import annotations

import json
import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from agents_trace.json_text import MAX_JSON_DEPTH, has_lone_surrogate, json_depth, loads_standard, may_hold_surrogates

BATCH_HEADER = "x-stepahead-batch"   # on a batch's request to the app: the batch it belongs to
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")
MAX_REQUESTS = 50_000
MAX_ERRORS = 100
Kept = TypeVar("Kept")
Buffer = bytes | mmap.mmap   # a file's bytes, read or mapped


@dataclass(frozen=True, slots=True)
class BatchRequest:
    custom_id: str
    body: dict


def _error(code: str, message: str, line: int | None = None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def _too_deep(number: int) -> dict:
    return _error("invalid_json_line", f"This line's body nests arrays or objects more than {MAX_JSON_DEPTH} "
                  "levels deep, past what a request may.", number)


def _json_problem(exc: ValueError) -> str:
    """What is wrong with a line that does not parse, in words a reader can act on: the
    parser's message and column (its "line 1" would be misread as the file's), or
    `loads_standard`'s for NaN, Infinity and numbers past a 64-bit float."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})."
    return str(exc)


def _json_kind(value: object) -> str:
    """The kind of JSON value `value` is, as an error names it ("an integer", "null")."""
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (list, "an array"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _line_error(raw: bytes, number: int, endpoint: str, seen: set[str]) -> tuple[dict | None, BatchRequest | None]:
    try:
        request = loads_standard(raw)
    except ValueError as exc:   # not JSON, not UTF-8, NaN/Infinity, or a number past what Python holds
        return _error("invalid_json_line", f"This line is not valid JSON: {_json_problem(exc)}", number), None
    except RecursionError:   # nested past the parser's stack
        return _too_deep(number), None
    if not isinstance(request, dict):
        return _error("invalid_json_line", "This line is not a JSON object.", number), None
    if json_depth(request, MAX_JSON_DEPTH + 1) > MAX_JSON_DEPTH + 1:   # the line's object, then its body's limit
        return _too_deep(number), None
    if may_hold_surrogates(raw) and has_lone_surrogate(request):
        return _error("invalid_json_line", "A string in this line holds an unpaired UTF-16 surrogate (U+D800 to "
                      "U+DFFF), which is not a Unicode character.", number), None
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _error("missing_required_parameter", "Each request needs a 'custom_id' string.", number,
                      "custom_id"), None
    if custom_id in seen:
        return _error("duplicate_custom_id", f"The custom_id '{custom_id}' is used by an earlier line; each "
                      "request needs its own.", number, "custom_id"), None
    if request.get("method") != "POST":
        return _error("invalid_method", "Each request's 'method' must be 'POST'.", number, "method"), None
    if request.get("url") != endpoint:
        return _error("mismatched_endpoint", f"The request's url {request.get('url')!r} is not the batch's endpoint "
                      f"{endpoint!r}.", number, "url"), None
    body = request.get("body")
    if not isinstance(body, dict):
        return _error("missing_required_parameter", "Each request needs a 'body' object.", number, "body"), None
    if body.get("stream") is True:
        return _error("invalid_value", "Batch requests cannot stream: leave 'stream' out or false.", number,
                      "body.stream"), None
    if body.get("background") is True:
        return _error("invalid_value", "Batch requests run in the background already: leave 'background' out "
                      "or false.", number, "body.background"), None
    if "model" not in body:
        return _error("missing_required_parameter", "Each request's body needs a 'model'.", number,
                      "body.model"), None
    if not isinstance(body["model"], str):   # there, of another type (QA231 F2: it was told missing)
        return _error("invalid_type", "Invalid type for 'body.model': expected a string, but got "
                      f"{_json_kind(body['model'])} instead.", number, "body.model"), None
    return None, BatchRequest(custom_id, body)


def batch_requests(data: bytes, endpoint: str) -> tuple[list[BatchRequest], list[dict]]:
    """(the requests, []) for a good file; ([], errors as OpenAI lists them) otherwise."""
    return checked_lines(data, endpoint, lambda offset, length, request: request)


def checked_lines(data: Buffer, endpoint: str, keep: Callable[[int, int, BatchRequest], Kept]
                  ) -> tuple[list[Kept], list[dict]]:
    """What `keep(offset, length, request)` makes of each good line of `data` (the line's
    bytes are `data[offset:offset + length]`, its "\r\n" end left out), in order, and [];
    or ([], errors as OpenAI lists them) for a file with any bad line. Each line's request
    is dropped once `keep` has seen it: only what it keeps stays in memory."""
    kept: list[Kept] = []
    errors: list[dict] = []
    seen: set[str] = set()
    model, model_line = None, None   # the batch's model: the first good request's, and its line
    num_good, num_unlisted = 0, 0   # the good lines, and the bad ones past the first MAX_ERRORS
    # NOTE: lines end at "\n" alone (JSON Lines): a bare "\r" is JSON whitespace inside a line
    for number, offset, raw in _lines_of(data):
        if not raw.strip():
            continue
        raw = raw.removesuffix(b"\r")
        error, request = _line_error(raw, number, endpoint, seen)
        if request is not None:
            if model is None:
                model, model_line = request.body["model"], number
            elif request.body["model"] != model:
                error = _error("mismatched_model", f"This request's model {request.body['model']!r} is not the "
                               f"batch's {model!r} (line {model_line}'s): a batch runs one model.", number,
                               "body.model")
        if error is not None:
            if len(errors) < MAX_ERRORS:
                errors.append(error)
            else:
                num_unlisted += 1
            continue
        seen.add(request.custom_id)
        num_good += 1
        if num_good > MAX_REQUESTS:
            return [], [_error("too_many_requests", f"A batch holds at most {MAX_REQUESTS:,} requests.")]
        if not errors:   # (a file with a bad line keeps nothing)
            kept.append(keep(offset, len(raw), request))
    if not errors and not kept:
        errors.append(_error("empty_file", "The input file holds no requests."))
    if num_unlisted:
        errors[-1] = {**errors[-1], "message": f"{errors[-1]['message']} (Not listed: {num_unlisted:,} more bad "
                      f"line{'s' if num_unlisted > 1 else ''} after this one; the first {MAX_ERRORS} are listed.)"}
    return ([], errors) if errors else (kept, [])


def _lines_of(data: Buffer) -> Iterator[tuple[int, int, bytes]]:
    """(number from 1, offset, bytes) of each piece of `data` between "\n"s, as
    `data.split(b"\n")` gives them, one at a time (`data` may be a file's mmap)."""
    start, number = 0, 1
    while (end := data.find(b"\n", start)) >= 0:
        yield number, start, data[start:end]
        start, number = end + 1, number + 1
    yield number, start, data[start:]
