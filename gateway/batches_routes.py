"""HTTP handlers of the Batch API: POST /v1/batches, GET /v1/batches, GET
/v1/batches/{id}, POST /v1/batches/{id}/cancel. The requests run in the background
(batch_runner.py); the results are files (files_routes.py).

Invariants: as for every handler, authentication first and errors OpenAI-shaped; a
tenant never reaches another tenant's batches (their ids answer 404); a body field these
endpoints do not know is a 400 naming it, a required one missing a 400
`missing_required_parameter` naming it; a batch whose model the gateway does not serve, or
cannot serve on the batch's endpoint (`endpoint_refusals`), fails at its creation, before
any line runs.
"""
from __future__ import annotations

import time
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.batch_lines import ENDPOINTS
from gateway.backend import Backend
from gateway.batch_store import Batch
from gateway.embeddings import embeddings_refusal
from gateway.local_embeddings import LocalEmbeddingBackend, embeddings_only
from gateway.request_metadata import checked_metadata
from gateway.errors import ApiError, invalid_request
from gateway.file_records import checked_expires_after
from gateway.http_io import fields_of, read_json_body
from gateway.ids import random_hex
from gateway.list_page import list_page, listed
from gateway.routes import tenant_endpoint
from gateway.state import GatewayState

COMPLETION_WINDOWS = {"24h": 24 * 3600}


@tenant_endpoint
async def create_batch(request: Request, state: GatewayState, tenant: str) -> Response:
    """POST /v1/batches: run the requests of `input_file_id` (a "batch" file) on
    `endpoint` within `completion_window` ("24h")."""
    body = fields_of(await read_json_body(request, state.config.max_body_bytes),
                     ("input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"),
                     ("input_file_id", "endpoint", "completion_window"))
    if not isinstance(body["endpoint"], str) or body["endpoint"] not in ENDPOINTS:
        raise invalid_request(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", param="endpoint",
                              code="invalid_value")
    window = body["completion_window"]
    window_s = COMPLETION_WINDOWS.get(window) if isinstance(window, str) else None
    if window_s is None:
        raise invalid_request("'completion_window' must be '24h'.", param="completion_window",
                              code="invalid_value")
    if not isinstance(body["input_file_id"], str):
        raise invalid_request("'input_file_id' must be a file id.", param="input_file_id")
    metadata = checked_metadata(body.get("metadata"))
    expiry = body.get("output_expires_after")
    output_expires_after_s = None if expiry is None else checked_expires_after(expiry, "output_expires_after")
    try:
        stored = await state.files.get(tenant, body["input_file_id"])
    except ApiError as error:
        error.param = "input_file_id"
        raise
    if stored.purpose != "batch":
        raise invalid_request(f"File '{stored.id}' has purpose '{stored.purpose}'; a batch reads a file uploaded "
                              "with purpose 'batch'.", param="input_file_id", code="invalid_value")
    now = int(time.time())
    batch = Batch(f"batch_{random_hex(32)}", tenant, body["endpoint"], stored.id, body["completion_window"],
                  now, now + window_s, metadata, output_expires_after_s=output_expires_after_s)
    # an unknown model fails the batch at once, as OpenAI's check of the file does (QA153 finding 5),
    # and so does one that cannot serve the endpoint (QA212 F4: each line was its own 400)
    served = endpoint_refusals(state.models_for(tenant), batch.endpoint)
    return JSONResponse((await state.batches.create(batch, served)).as_object())


def endpoint_refusals(backends: Mapping[str, Backend], endpoint: str) -> dict[str, str | None]:
    """Each served model, with the message of the 400 `model_not_supported` a request of
    `endpoint` would get from it (None where it serves `endpoint`), as the endpoints decide
    it: /v1/embeddings by `embeddings_refusal`, and a local embedding model serves nothing
    else (gateway/local_embeddings.py)."""
    def refusal(name: str, backend: Backend) -> str | None:
        if endpoint == "/v1/embeddings":
            refused = embeddings_refusal(name, backend)
            return None if refused is None else refused.message
        return embeddings_only(name).message if isinstance(backend, LocalEmbeddingBackend) else None
    return {name: refusal(name, backend) for name, backend in backends.items()}


@tenant_endpoint
async def list_batches(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/batches: the tenant's batches in the order they were made (`order` "desc",
    newest first, the default, or "asc"; `limit` 1-100, default 20; `after` a batch id)."""
    page = list_page(request.query_params)
    batches, has_more = await state.batches.store.list(tenant, page)
    return JSONResponse(listed([state.batches.current(batch).as_object() for batch in batches], has_more))


@tenant_endpoint
async def batch(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/batches/{id}: the batch as it stands."""
    found = await state.batches.store.get(tenant, request.path_params["batch_id"])
    return JSONResponse(state.batches.current(found).as_object())


@tenant_endpoint
async def cancel_batch(request: Request, state: GatewayState, tenant: str) -> Response:
    """POST /v1/batches/{id}/cancel: stop sending its requests; it is `cancelling` until
    those under way finish, then `cancelled`. A batch already finished is a 400."""
    found = await state.batches.store.get(tenant, request.path_params["batch_id"])
    cancelled = await state.batches.cancel(found)
    if cancelled.status not in ("cancelling", "cancelled"):
        raise invalid_request(f"Batch '{found.id}' cannot be cancelled: it is already {cancelled.status}.",
                              param="batch_id", code="invalid_value")
    return JSONResponse(cancelled.as_object())
