"""The models endpoints: `GET /v1/models`, `GET` and `DELETE /v1/models/{model}`.

Invariant: a tenant sees only the models it may use (its `models`, else every one the
gateway serves: `GatewayState.models_for`); any other is a 404 `model_not_found`, as a
model not served is; a served model is never deleted through the API (a 403).
"""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import ApiError
from gateway.routes import tenant_endpoint
from gateway.state import GatewayState


def _model_object(state: GatewayState, name: str, tenant: str) -> dict:
    return {"id": name, "object": "model", "created": state.created_s,
            "owned_by": state.backend(name, tenant).owned_by}


@tenant_endpoint
async def list_models(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/models: every model this gateway serves that the tenant may use."""
    return JSONResponse({"object": "list", "data": [_model_object(state, name, tenant)
                                                    for name in state.models_for(tenant)]})


@tenant_endpoint
async def retrieve_model(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/models/{model}: one model object, or a 404 "model_not_found" (a model the
    tenant may not use included)."""
    return JSONResponse(_model_object(state, request.path_params["model"], tenant))


@tenant_endpoint
async def delete_model(request: Request, state: GatewayState, tenant: str) -> Response:
    """DELETE /v1/models/{model} (OpenAI's deletes a fine-tuned model): a 404
    "model_not_found" for a model not served, as GET's; a served one is the gateway's
    configuration, never deleted through the API: a 403 saying so."""
    name = request.path_params["model"]
    state.backend(name, tenant)   # the 404 for a model not served (to this tenant)
    raise ApiError(403, f"The model '{name}' is part of this gateway's configuration and cannot be deleted "
                   "through the API; remove it from the config file instead.", "invalid_request_error",
                   "model_not_deletable", "model")
