"""HTTP handlers of the Files API: POST /v1/files (a multipart upload: `file`, `purpose`,
`expires_after`), GET /v1/files, GET and DELETE /v1/files/{id}, GET /v1/files/{id}/content.

Invariants: as for every handler, authentication first and errors OpenAI-shaped (a
content `Range` outside the file too: file_ranges); a tenant never reaches another
tenant's files (their ids answer 404); an upload past `[server] max_file_bytes` is a 413,
and one that would bring its tenant's stored files past `[server] file_bytes_per_tenant`
a 400 `file_storage_limit_exceeded` (gateway/file_quota.py), and nothing of either is
kept; the limit is checked first (QA206 F2): a body declaring more than the limit is read
(no further than it declares) even past the room, so a file past the limit is the 413;
a body sent in chunks (no Content-Length) is read no further than the limit or the room
its tenant has left (past the room, the 400); a number in the form is ASCII digits only. An upload sent
with a `Content-Encoding` is a 415 `unsupported_content_encoding`, as a JSON body is (never
read as if it were plain), and its media type is matched in any case. An upload whose
body stalls past `[server] body_timeout_s` is a 408 `request_timeout` (gateway/body_timeout.py),
its reservation released and nothing of it kept (its parts were only spooled: the store's
partial file is begun once the whole form is read). A required field missing (`file`, also
from a body that is no multipart form, or `purpose`) is a 400 `missing_required_parameter`
naming it, as a batch's missing field is; a field of the form given twice (two `purpose`
fields, as two file parts) is a 400 naming it, never the last one taken (QA212 F2, F3).
"""
from __future__ import annotations

import json
import os

import anyio
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import ApiError, invalid_request
from gateway.file_quota import file_storage_full
from gateway.file_ranges import RangedFile
from gateway.file_records import BATCH_INPUT_EXPIRY_S, UPLOAD_PURPOSES, checked_expires_after, file_not_found
from gateway.body_timeout import BodyTimedOut
from gateway.http_io import ascii_int, counted_body, limited_body, refuse_encoded_body
from gateway.list_page import list_page, listed
from gateway.multipart_end import CloseDelimiterWatch
from gateway.routes import tenant_endpoint
from gateway.state import GatewayState

MULTIPART_SLACK_BYTES = 64 * 1024   # the form's own bytes around the file
# GET /v1/files's `limit`: 1-10,000, default 10,000, as OpenAI's reference gives it (its
# other lists: 1-100, default 20), so one `client.files.list()` call's `.data` holds them all
FILES_LIMIT = 10_000
FORM_FIELDS = ("file", "purpose", "expires_after", "expires_after[anchor]", "expires_after[seconds]")


def file_too_large(limit: int, size: int | None) -> ApiError:
    """The 413 of an upload past `[server] max_file_bytes`, a limit on the file's bytes, not
    on its body's (QA231 F3: it read "Request body exceeds the limit", though a file of
    exactly the limit, in a larger body, is taken): `size` the file's, where known; None
    where the body was past the limit and the form's slack, its file not read to its end."""
    setting = f"the limit of {limit} bytes on an uploaded file (`[server] max_file_bytes`)"
    message = (f"The file is {size} bytes, past {setting}." if size is not None else
               f"This upload's body is past {setting} and the {MULTIPART_SLACK_BYTES} bytes of the form around it.")
    return ApiError(413, message, "invalid_request_error", "request_too_large")


@tenant_endpoint
async def upload_file(request: Request, state: GatewayState, tenant: str) -> Response:
    """POST /v1/files: keep the uploaded `file` for `purpose` ("batch" for the Batch API)."""
    limit, cap = state.config.max_file_bytes, state.config.file_bytes_per_tenant
    refuse_encoded_body(request, "the multipart form uncompressed")
    declared = ascii_int(request.headers.get("content-length"))
    if declared is not None and declared > limit + MULTIPART_SLACK_BYTES:
        raise file_too_large(limit, None)
    if media_type(request.headers.get("content-type", "")) != "multipart/form-data":
        raise invalid_request("Missing required parameter: 'file' (upload it as multipart/form-data with the "
                              "fields 'file' and 'purpose').", param="file", code="missing_required_parameter")
    stored = await state.files.stored_bytes(tenant)
    with state.files.uploads.reserving(tenant, declared or 0) as reservation:
        room = cap - stored - reservation.others   # what the tenant's files and its other uploads leave
        # a declared body past the limit (within the form's slack) may hold a file past it: it is
        # read (no further than it declares), so the 413, the one the user must fix, is answered
        # before the room is weighed (`files.add`; QA206 F2)
        maybe_over_limit = declared is not None and declared > limit
        if declared is not None and declared > room + MULTIPART_SLACK_BYTES and not maybe_over_limit:
            raise file_storage_full(cap, stored, declared, "this upload's body", reservation.others)
        closing = CloseDelimiterWatch.of(request.headers.get("content-type", ""))
        try:
            form = await limited_body(counted_body(request, lambda sent: state.files.uploads.grow(reservation, sent),
                                                   closing.feed if closing is not None else None),
                                      (limit if maybe_over_limit else min(limit, max(room, 0))) + MULTIPART_SLACK_BYTES
                                      ).form(max_files=1, max_fields=8)
        except BodyTimedOut:   # its body stalled: a 408 (the form's spooled parts are closed by its parser)
            raise
        except ApiError:   # past the limit or the room (with the form's slack): nothing more is read, nothing kept
            raise (file_too_large(limit, None) if limit <= room or maybe_over_limit
                   else file_storage_full(cap, stored, None, sending=reservation.others)) from None
        except Exception as exc:   # NOTE: starlette's MultiPartException and its parser's errors
            reason = getattr(exc, "detail", None) or getattr(exc, "message", None) or exc   # not "400: ..." (QA113)
            if str(reason).startswith("Too many files"):   # starlette's words for a second file part (QA217 F5)
                raise invalid_request("Give one file part, named 'file': this upload has more than one (a field "
                                      "such as 'purpose' sent as a file part counts too).", param="file",
                                      code="invalid_value") from None
            raise invalid_request(f"The multipart body could not be read: {reason}", param="file") from None
        try:
            if closing is not None and (cut := closing.problem()) is not None:   # its last part dropped
                raise invalid_request(f"The multipart body could not be read: {cut}", param="file")
            _refuse_repeated_fields(form)
            upload, purpose = form.get("file"), form.get("purpose")
            if not isinstance(upload, UploadFile):
                raise invalid_request("Missing required parameter: 'file' (a file part).", param="file",
                                      code="missing_required_parameter")
            if purpose is None:
                raise invalid_request(f"Missing required parameter: 'purpose' (one of {', '.join(UPLOAD_PURPOSES)}).",
                                      param="purpose", code="missing_required_parameter")
            if purpose not in UPLOAD_PURPOSES:
                raise invalid_request(f"'purpose' must be one of {', '.join(UPLOAD_PURPOSES)}.",
                                      param="purpose", code="invalid_value")
            if upload.size is not None and upload.size > limit:
                raise file_too_large(limit, upload.size)
            kept = await state.files.add(tenant, upload.filename or "upload", purpose, upload.file, limit,
                                         _expires_after_s(form, purpose), max_tenant_bytes=cap)
        finally:
            await form.close()
    return JSONResponse(kept.as_object())


def media_type(content_type: str) -> str:
    """The media type of a `Content-Type` value, without its parameters, in lower case
    (media types are case-insensitive, RFC 9110 8.3.1; starlette's form parser reads
    `Multipart/Form-Data` as well)."""
    return content_type.partition(";")[0].strip(" \t").lower()


def _refuse_repeated_fields(form) -> None:
    """A 400 naming the first field of the upload's form (`FORM_FIELDS`) given more than once:
    which one was meant cannot be known (a repeated file part is refused by the parser)."""
    for name in FORM_FIELDS:
        if (count := len(form.getlist(name))) > 1:
            raise invalid_request(f"Give '{name}' once: this upload has {count} '{name}' fields.", param=name,
                                  code="invalid_value")


def _expires_after_s(form, purpose: str) -> int | None:
    """The upload's `expires_after` (the form fields `expires_after[anchor]` and
    `expires_after[seconds]`, as OpenAI's clients send it, or one `expires_after` field
    holding its JSON object), in seconds; without it a
    "batch" file expires after 30 days, as at OpenAI, and the others never."""
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    whole = form.get("expires_after")   # one field holding the JSON object, as a hand-made form may send it
    if whole is not None:
        if anchor is not None or seconds is not None:
            raise invalid_request("Give 'expires_after' once: as one JSON field or as its bracketed fields.",
                                  param="expires_after", code="invalid_value")
        try:
            policy = json.loads(whole) if isinstance(whole, str) else None
        except (ValueError, RecursionError):   # not JSON, or nested past the parser's stack (QA163)
            policy = None
        return checked_expires_after(policy, "expires_after")
    if anchor is None and seconds is None:
        return BATCH_INPUT_EXPIRY_S if purpose == "batch" else None
    if isinstance(seconds, str) and ascii_int(seconds) is not None:
        seconds = int(seconds)
    return checked_expires_after({"anchor": anchor, "seconds": seconds}, "expires_after")


@tenant_endpoint
async def list_files(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/files: the tenant's files (`purpose`, `limit` 1-10,000 (default 10,000, as at
    OpenAI), `order` "desc" (default) or "asc" by creation, `after` a file id, a deleted or
    expired one's too: gateway/file_store.py)."""
    query = request.query_params
    page = list_page(query, default_limit=FILES_LIMIT, max_limit=FILES_LIMIT)
    files, has_more = await state.files.list(tenant, query.get("purpose"), page)
    return JSONResponse(listed([file.as_object() for file in files], has_more))


@tenant_endpoint
async def file(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/files/{id}: the file object; DELETE removes the file."""
    file_id = request.path_params["file_id"]
    if request.method == "DELETE":
        await state.files.delete(tenant, file_id)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})
    return JSONResponse((await state.files.get(tenant, file_id)).as_object())


@tenant_endpoint
async def file_content(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/files/{id}/content: the file's bytes, or those a `Range` asks for (file_ranges:
    a Range it cannot read is ignored, one outside the file an OpenAI-shaped 416)."""
    stored = await state.files.get(tenant, request.path_params["file_id"])
    media_type = "application/jsonl" if stored.filename.endswith(".jsonl") else "application/octet-stream"
    path = state.files.path_of(stored)
    try:
        stat_result = await anyio.to_thread.run_sync(os.stat, path)
    except FileNotFoundError:   # deleted since it was looked up
        raise file_not_found(stored.id) from None
    return RangedFile(path, stat_result=stat_result, media_type=media_type, filename=stored.filename)
