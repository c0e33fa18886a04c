"""The service tier a request runs in (`service_tier`; `WorkItem.flex` for local models).

Invariants: a local model serves a request as "flex" when the client asks for it, when
its tenant is configured `service_tier = "flex"`, or when it is a Batch API request whose
line names no tier; an upstream model gets the tier the client sent, whatever the tenant
or batch (not every upstream model offers flex). A request is a batch request only when it
carries the batch header *and* an internal key the gateway gave its own batch runner, so a
client cannot pass for one.
"""
from __future__ import annotations

from starlette.requests import Request

from gateway.backend import Backend
from gateway.batch_lines import BATCH_HEADER


def is_batch_request(request: Request) -> bool:
    """A Batch API request (sent by the gateway itself with an internal key)."""
    return BATCH_HEADER in request.headers and request.app.state.gateway.keys.is_internal(
        request.headers.get("authorization"))


def request_tier(request: Request, tenant: str, asked: str | None, backend: Backend) -> str | None:
    """The `service_tier` the request runs with on `backend`."""
    if backend.owned_by != "stepahead":
        return asked
    if asked is None and is_batch_request(request):
        return "flex"
    return request.app.state.gateway.config.service_tier(tenant, asked)
