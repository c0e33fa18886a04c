"""The ASGI app: `build_app(config)` wires state, routes and error handlers.

Invariants: all state lives in the `GatewayState` built here (no globals); backends start
in the lifespan before the first request and stop after the last; whatever escapes a
handler (an unknown route, a wrong method, a bug) still leaves as an OpenAI-shaped error,
never as an HTML or bare-text 500.
`uvicorn --factory gateway.app:build_app` works too: with no argument the config comes
from $STEPAHEAD_CONFIG, or the default one with the demo key from $STEPAHEAD_DEMO_KEY; a
bad file is then one `stepahead: bad config:` line and exit status 2, as under `serve`.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from agents_trace.store_schema import StoreLocked
from cache.error_text import one_line_error
from gateway import (batches_routes, conversations_routes, files_routes, models_routes, responses_input_tokens,
                     responses_routes, routes, stored_responses_routes, tracing)
from gateway.access_log import redact_access_log
from gateway.auth import KeyRing
from gateway.backend import Backend
from gateway.config import (UNAUTHENTICATED, ConfigError, GatewayConfig, LocalModelConfig, default_config,
                            demo_key_from, load_config)
from gateway.conversation_archive import ConversationArchive
from gateway.conversation_store import ConversationStore
from gateway.errors import ApiError, invalid_url, server_error
from gateway.exchange import CLIENT_CLOSED_STATUS
from gateway.fast_paths import CompletionFastPath
from gateway.file_store import FileStore
from gateway.forecasting_start import start_forecasting, stop_forecasting
from gateway.heap import freeze_startup_heap, thaw_heap
from gateway.body_timeout import BodyTimeout
from gateway.http_io import ClientGone
from gateway.limiters import Limiters
from gateway.literal_routes import RouteBesideLiterals
from gateway.model_backends import build_backend, engine_options_run, num_local_workers
from gateway.metrics_genai import GenAiRegistry
from gateway.response_archive import ResponseArchive
from gateway.reload import HangupsBeforeStart, Overrides, reload_on_hangup
from gateway.response_store import ResponseStore
from gateway.spent_tokens import start_spent_tokens
from gateway.start_failure import StartFailed, stated_start_failures
from gateway.state import GatewayState, batch_runner
from gateway.stopping import begin_stop, hangups_ignored_once_stopping
from gateway.store_places import check_store_places
from gateway.tracing import build_tracer, trace_router
from gateway.uvicorn_server import called_by_uvicorn, set_up_factory_logging
from shards.engine_options import EngineOptionError

log = logging.getLogger("stepahead.gateway")


def response_store(config: GatewayConfig) -> ResponseStore:
    path = config.resolved_responses_db()
    archive = ResponseArchive(path, config.responses_per_tenant) if path is not None else None
    return ResponseStore(config.responses_per_tenant, archive)


def conversation_store(config: GatewayConfig) -> ConversationStore:
    return ConversationStore(ConversationArchive(config.resolved_conversations_db(), config.conversations_per_tenant))


def config_from_environment() -> GatewayConfig:
    path = os.environ.get("STEPAHEAD_CONFIG")
    if path:
        return load_config(path)
    demo_key = demo_key_from(os.environ)
    if not os.environ.get("STEPAHEAD_DEMO_KEY", "").strip():   # a made-up key: say which
        print(f"stepahead demo API key: {demo_key}", flush=True)
    return default_config(demo_key)


async def start_all(backends, started: list[Backend]) -> None:
    """Start every backend at once; each one started is appended to `started` (so the
    caller stops exactly those), and the first failure is raised once all have settled."""
    async def start(backend: Backend) -> None:
        with stated_start_failures(f"model {backend.model_id!r}"):
            await backend.start()
        started.append(backend)

    outcomes = await asyncio.gather(*(start(backend) for backend in backends), return_exceptions=True)
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if failures:
        raise failures[0]


def by_method(**handlers: Callable) -> Callable:
    """One endpoint for a path whose methods have their own handlers (HEAD is GET's): one
    route, so a 405 on it lists every method it takes in `Allow`."""
    async def endpoint(request: Request) -> Response:
        return await handlers[request.method if request.method in handlers else "GET"](request)
    return endpoint


def build_app(config: GatewayConfig | None = None, *, config_path: str | None = None,
              overrides: Overrides | None = None) -> FastAPI:
    """`config_path`: the file `config` was read from; SIGHUP reloads its tenants
    (gateway/reload.py), with `overrides` (what the command line set over the file)
    applied to the file reloaded; with no file a SIGHUP is logged and ignored. Without
    `config`, $STEPAHEAD_CONFIG's file, if set, is both, and (as `uvicorn --factory` calls
    this before the app starts) a SIGHUP from here on is counted until the app's handler
    serves it, as `stepahead serve` does. Without `config` the access log is redacted too
    (gateway/access_log.py, as `stepahead serve` has it), and when uvicorn's factory is the
    caller its loggers get what `serve` gives them (gateway/uvicorn_server.py
    `set_up_factory_logging`: the product's log lines at uvicorn's `--log-level`, from here on)."""
    if config is None:
        redact_access_log()   # QA199 F1: after uvicorn's logging set-up (it runs before the factory)
        if called_by_uvicorn():
            set_up_factory_logging()
        config_path = os.environ.get("STEPAHEAD_CONFIG") or None
        HangupsBeforeStart.install()   # None off the main thread: nothing to catch there
        try:
            config = config_from_environment()
            for model in config.models:   # as `stepahead serve` checks them before anything starts
                if isinstance(model, LocalModelConfig):
                    engine_options_run(model, num_local_workers(config))
        except (ConfigError, EngineOptionError, OSError) as exc:   # uvicorn's factory call would print a traceback
            print(f"stepahead: bad config: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
    files_dir = config.resolved_files_dir()
    # the multipart parser logs each malformed upload as a warning before raising the error
    # the client is answered with (a 400): a client's bad upload is not the server's to log
    logging.getLogger("python_multipart.multipart").setLevel(logging.ERROR)
    limiters = Limiters({t.name: t.limits for t in config.tenants}, queue_timeout_s=config.queue_timeout_s)
    state = GatewayState(
        config=config,
        keys=KeyRing(config.tenants),
        limiters=limiters,
        metrics=GenAiRegistry(),   # its OTel instruments set with the tracer (OTLP on)
        backends={m.name: build_backend(m, config, limiters) for m in config.models},
        responses=response_store(config),
        conversations=conversation_store(config),
        files=FileStore(files_dir))
    state.batches = batch_runner(state, files_dir, config.batch_concurrency, yields=config.batch_yield)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        started: list[Backend] = []
        heap = spent_saves = None
        reloads = reload_on_hangup(state, config_path, overrides)   # from the start on: a SIGHUP never ends it
        unchain = (hangups_ignored_once_stopping(asyncio.get_running_loop(), lambda: begin_stop(state))
                   if reloads is not None else None)
        try:
            # before the models load: every place the stores cannot write fails the start now, in one line
            await asyncio.to_thread(check_store_places, config)
            state.tracer = build_tracer(config, state.metrics)
            if state.tracer is not None:
                with stated_start_failures(f"the trace store {state.tracer.store_path} (set [tracing] store_path or "
                                           "$STEPAHEAD_TRACE_DB to a place it can write)"):
                    try:
                        state.tracer.start()
                    except StoreLocked as exc:   # no place to change: another connection holds its write lock
                        raise StartFailed(f"the trace store {state.tracer.store_path}: {one_line_error(exc)}") from exc
                if state.tracer.captures_content:   # prompts and replies are stored: say so once
                    print("stepahead: traces keep prompts and replies (capture_content); each tenant's keys "
                          "see its own in /ui", file=sys.stderr, flush=True)
            spent_saves = await asyncio.to_thread(start_spent_tokens, state.limiters, asyncio.get_running_loop())
            # the forecasters load (hmmlearn's import, the saved models) while the
            # models start, and the models start side by side: none needs another
            forecasting = asyncio.ensure_future(asyncio.to_thread(start_forecasting, state.tracer, state.backends))
            try:
                await start_all(state.backends.values(), started)
            finally:
                state.forecasts = await forecasting
            if config.freeze_startup_heap:
                heap = freeze_startup_heap()
            state.gc_pauses.install()
            state.is_ready = True
            await state.batches.start(_app)   # batches a stopped gateway left go on
            yield
        finally:
            if reloads is not None:
                reloads.remove()
            if unchain is not None:
                unchain()
            state.is_ready = False
            state.gc_pauses.remove()
            if heap is not None:
                thaw_heap(heap)
            await state.background.cancel_all()  # stored as cancelled before the store closes (begun at the signal)
            await state.batches.stop()   # where they are: they go on at the next start
            for backend in reversed(started):
                await backend.stop()
            if spent_saves is not None:   # after the last request: its tokens are counted
                await asyncio.to_thread(spent_saves.stop)
            if state.tracer is not None:
                state.tracer.stop()
            stop_forecasting(state.forecasts)
            state.responses.close()
            state.conversations.close()
            state.batches.store.close()
            state.files.close()

    app = FastAPI(title="stepahead", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = state
    # NOTE: plain Starlette routes: the handlers take the raw Request, so FastAPI's
    # dependency solving would only add ~0.1 ms per request.
    app.add_route("/v1/chat/completions", routes.chat_completions, methods=["POST"])
    app.add_route("/v1/completions", routes.completions, methods=["POST"])
    app.add_route("/v1/embeddings", routes.embeddings, methods=["POST"])
    app.add_route("/v1/responses", responses_routes.create_response, methods=["POST"])
    app.add_route("/v1/responses/input_tokens", responses_input_tokens.count_input_tokens, methods=["POST"])
    app.router.routes.append(RouteBesideLiterals("/v1/responses/{response_id}", stored_responses_routes.stored_response,
                                                 methods=["GET", "DELETE"], taken=frozenset({"input_tokens"})))
    app.add_route("/v1/responses/{response_id}/cancel", stored_responses_routes.cancel_response, methods=["POST"])
    app.add_route("/v1/responses/{response_id}/input_items", stored_responses_routes.stored_input_items, methods=["GET"])
    app.add_route("/v1/conversations", conversations_routes.create_conversation, methods=["POST"])
    app.add_route("/v1/conversations/{conversation_id}", conversations_routes.conversation,
                  methods=["GET", "POST", "DELETE"])
    app.add_route("/v1/conversations/{conversation_id}/items", conversations_routes.conversation_items,
                  methods=["GET", "POST"])
    # `:path`: an item's id may hold a "/" (sent as %2F, which the router reads decoded:
    # QA224 F2); an empty one is left to the slash redirect to `.../items`, as before
    app.router.routes.append(RouteBesideLiterals("/v1/conversations/{conversation_id}/items/{item_id:path}",
                                                 conversations_routes.conversation_item, methods=["GET", "DELETE"],
                                                 taken=frozenset({""})))
    app.add_route("/v1/files", by_method(POST=files_routes.upload_file, GET=files_routes.list_files),
                  methods=["GET", "POST"])
    app.add_route("/v1/files/{file_id}", files_routes.file, methods=["GET", "DELETE"])
    app.add_route("/v1/files/{file_id}/content", files_routes.file_content, methods=["GET"])
    app.add_route("/v1/batches", by_method(POST=batches_routes.create_batch, GET=batches_routes.list_batches),
                  methods=["GET", "POST"])
    app.add_route("/v1/batches/{batch_id}", batches_routes.batch, methods=["GET"])
    app.add_route("/v1/batches/{batch_id}/cancel", batches_routes.cancel_batch, methods=["POST"])
    app.add_route("/v1/models", models_routes.list_models, methods=["GET"])
    app.add_route("/v1/models/{model:path}", by_method(GET=models_routes.retrieve_model, DELETE=models_routes.delete_model),
                  methods=["GET", "DELETE"])
    app.add_route("/health", routes.health, methods=["GET"])
    app.add_route("/metrics", routes.metrics, methods=["GET"])
    app.include_router(trace_router())
    counted_endpoints = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
                         "/v1/embeddings": "embeddings", "/v1/responses": "responses",
                         "/v1/responses/input_tokens": "input_tokens"}   # where a handler counts requests_total

    def count_refusal(scope: dict, status: int) -> None:
        if scope["method"] == "POST" and (endpoint := counted_endpoints.get(scope["path"])) is not None:
            state.metrics.record_request(UNAUTHENTICATED, "", endpoint, status)

    app.add_middleware(CompletionFastPath, error_response=routes.error_response, on_refused=count_refusal, handlers={
        "/v1/chat/completions": routes.chat_completions, "/v1/completions": routes.completions})
    app.add_middleware(BodyTimeout, timeout_s=config.body_timeout_s)   # outermost: the fast path's bodies too

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, error: ApiError):
        return routes.error_response(error)

    api_paths = tuple(route.path for route in app.routes if getattr(route, "path", "").startswith("/v1/"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException):
        if error.status_code == 404 and error.detail == "Not Found":   # no route: the router's own 404
            return routes.error_response(invalid_url(request.method, request.url.path, api_paths))
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        detail = error.detail if isinstance(error.detail, dict) else {"message": str(error.detail)}
        kind = "server_error" if error.status_code >= 500 else "invalid_request_error"   # as errors.unavailable's 503s
        return routes.error_response(ApiError(error.status_code, str(detail.get("message")),
                                              kind, detail.get("code", code),
                                              detail.get("param"), dict(error.headers or {})))   # 405's Allow

    @app.exception_handler(sqlite3.Error)
    async def _store_error(request: Request, error: sqlite3.Error):   # only the trace routes read SQLite here
        return routes.error_response(tracing.trace_store_unavailable(request, error))

    @app.exception_handler(ClientGone)
    async def _client_gone(_request: Request, _error: ClientGone):
        return Response(status_code=CLIENT_CLOSED_STATUS)  # no one is left to read it

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, error: Exception):
        log.exception("unhandled error in a request handler", exc_info=error)
        return routes.error_response(server_error())

    return app
