"""The trace viewer's HTTP surface: JSON under `/v1/traces/...` and the page at `/ui`.

`build_trace_router(viewer=..., store_path=...)` returns an `APIRouter` the gateway
includes. `viewer` is a FastAPI dependency that authenticates the caller (the same Bearer
keys as the API) and returns a `Viewer`; `store_path(request)` says where the store is.
Invariants: a tenant sees only its own sessions: another tenant's session is a 404, the
same answer as a session that does not exist, so ids cannot be probed; an admin sees
every tenant's and names the tenant when an id exists in several (else 409). Lists are
pages (`has_more`), and a session's page can be the one holding the step a request id
names, wherever it lies; message content comes from its own endpoint, whole. A caller may
delete a session it can see (`DELETE /v1/traces/sessions/{id}`), never another's. Every
id the gateway accepts has a URL: `/`, `%`, `?`, `#` in it are sent percent-encoded (the
`/` may also go plain), and session_path says which session and resource a path names; an
id is found as given or, where no session has it, percent-decoded (an answer's
`x-session-id` pasted into a URL or `id_contains`), within the caller's scope either way.
The page and its assets (viewer_page) hold no data and need no key; every data request
sends one. The reads that can scan the store (stats, the session list, a session's page,
the sessions a multi-session export gathers) run in a worker thread that stops soon after
the client leaves (client_gone): a 499 nobody receives.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from agents_trace.client_gone import unless_client_leaves
from agents_trace.export import (LEFT_OUT_HEADER, ExportCounts, export_lines, export_sessions_lines, header_line,
                                 in_chunks, num_left_out)
from agents_trace.export_filename import export_disposition
from agents_trace.query_params import list_cursor, query_cursor, query_flag, query_page, query_time
from agents_trace.session_path import SessionPath, parse_session_path, session_tail_route
from agents_trace.session_route import SESSION_METHODS, SessionTailRoute, allowed_methods, method_not_allowed
from agents_trace.store_delete import StoreBusy, delete_sessions
from agents_trace.store_queries import (ReadCancelled, SessionFilter, find_session_as_given, list_sessions,
                                        matching_session_keys)
from agents_trace.step_queries import has_step, list_steps, request_step, step_content
from agents_trace.store_stats import StatsCancelled, StatsWindow, tenant_stats
from agents_trace.text_table import counted
from agents_trace.viewer_page import add_viewer_page

READ_STOPPED = (StatsCancelled, ReadCancelled)   # how a read says it stopped as its client left


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: a tenant, or an admin (who sees every tenant)."""

    tenant: str
    is_admin: bool = False


def _not_found(session: str) -> HTTPException:
    return HTTPException(404, f"No session '{session}' is visible to this API key.")


def build_trace_router(*, viewer: Callable[..., Viewer],
                       store_path: Callable[[Request], Path | None],
                       forecasters: Callable[[Request], Any] | None = None,
                       tracing: Callable[[Request], bool] | None = None) -> APIRouter:
    """`forecasters(request)`: the live forecasters (with `tenants()` and
    `tenant_status(tenant)`, as gateway.forecasting.ForecastRelay has), or None when
    nothing forecasts; `tracing(request)`: whether new requests are traced (None: they
    are), which `/v1/traces/me` says, so `/ui` can say when the store gets nothing new."""
    router = APIRouter()

    def path_of(request: Request) -> Path | None:
        return store_path(request)

    def asks_for_another(who: Viewer, tenant: str | None) -> bool:
        """A tenant asking for another tenant's data (to whom it is none)."""
        return tenant is not None and not who.is_admin and tenant != who.tenant

    def scope(who: Viewer, tenant: str | None) -> str | None:
        """The tenant a query is limited to (None: all, for an admin only)."""
        return tenant if who.is_admin else who.tenant

    def resolve(path: Path | None, who: Viewer, session: str, tenant: str | None, stop=None) -> dict:
        """The one session `session` names (as given, or percent-decoded where no session
        has it as given) within the caller's scope; its own id is `["session"]`. `stop`:
        set once the client left."""
        if path is None or asks_for_another(who, tenant):
            raise _not_found(session)
        matches = find_session_as_given(path, session, scope(who, tenant), stop)
        if not matches:
            raise _not_found(session)
        if len(matches) > 1:
            raise HTTPException(409, {"message": f"Session '{session}' exists in {len(matches)} tenants; "
                                                 "name one with ?tenant=.",
                                      "param": "tenant", "code": "ambiguous_session"})
        return matches[0]

    @router.get("/v1/traces/me")
    def me(request: Request, who: Viewer = Depends(viewer)) -> dict:
        return {"tenant": who.tenant, "is_admin": who.is_admin,
                "tracing": True if tracing is None else bool(tracing(request))}

    def query_window(request: Request, who: Viewer, agent: str | None,
                     tenant: str | None) -> StatsWindow | None:
        """The tenant, agent (`agent`, a name; `agent_contains`, part of one in any case)
        and [since, until] the query asks for, within the caller's scope; None when another
        tenant's are asked for (which, to a tenant, are none)."""
        since, until = query_time(request, "since"), query_time(request, "until")   # as the CLI's --since
        if asks_for_another(who, tenant):
            return None
        return StatsWindow(tenant=scope(who, tenant), agent=agent or None, since_s=since, until_s=until,
                           agent_contains=request.query_params.get("agent_contains") or None)

    def session_filter(request: Request, who: Viewer, agent: str | None,
                       tenant: str | None) -> SessionFilter | None:
        """The sessions the query selects (`query_window`, `errors` for sessions with an
        error, `id_contains` for those whose id holds that text in any case, or its
        percent-decoded form, or with a step whose request id, a reply's `x-request-id`, is
        that text); None when another tenant's are asked for."""
        errors_only = query_flag(request, "errors")
        window = query_window(request, who, agent, tenant)
        if window is None:
            return None
        return SessionFilter(tenant=window.tenant, agent=window.agent, agent_contains=window.agent_contains,
                             since_s=window.since_s, until_s=window.until_s, errors_only=errors_only,
                             id_contains=request.query_params.get("id_contains") or None)

    @router.get("/v1/traces/sessions", response_model=None)
    async def sessions(request: Request, who: Viewer = Depends(viewer), agent: str | None = None,
                       tenant: str | None = None) -> dict | Response:
        """A page of the sessions `session_filter` selects, most recently active first: from
        `offset`, or after `before`, a page's `next_before` (its last row's key), so a page
        after the first neither repeats nor misses rows when sessions move up meanwhile. The
        cursor only narrows the caller's own scope: it never widens the tenant filter.
        Read in a worker thread that stops once the client left (`unless_client_leaves`)."""
        limit, offset = query_page(request, 50)
        after = query_cursor(request, "before")
        where = session_filter(request, who, agent, tenant)
        path = path_of(request)
        if path is None or where is None:
            return {"data": [], "has_more": False, "offset": offset, "limit": limit, "next_before": None}

        def read(stop) -> dict:
            page = list_sessions(path, where, limit=limit, offset=offset, after=after, stop=stop)
            return {**page, "next_before": list_cursor(page["data"][-1]) if page["data"] else None}
        return await unless_client_leaves(request, read, READ_STOPPED)

    @router.get("/v1/traces/stats", response_model=None)
    async def stats(request: Request, who: Viewer = Depends(viewer), agent: str | None = None,
                    tenant: str | None = None) -> dict | Response:
        """Per-tenant figures over the steps that arrived in [since, until] (store_stats),
        walked in a worker thread that stops soon after the client leaves (a closed tab, a
        fetch given up): a walk of the whole store nobody reads would hold a core for
        seconds. A client gone gets no figures (a 499 nobody receives), never a 500."""
        window = query_window(request, who, agent, tenant)
        path = path_of(request)
        if path is None or window is None:
            return {"tenants": [], "total": None}
        # rendered in the thread too: off the event loop
        return await unless_client_leaves(request, lambda stop: JSONResponse(tenant_stats(path, window, stop)),
                                          READ_STOPPED)

    @router.get("/v1/traces/forecasters")
    def forecaster_status(request: Request, who: Viewer = Depends(viewer), tenant: str | None = None) -> dict:
        """Where each tenant's forecasts stand: its step model and its return gaps. A
        tenant sees its own (learned or not yet); an admin every tenant's the forecasters
        learned anything of, by name, a page at a time (`limit`, `offset`; `num_tenants`
        counts them all), or one of them (`?tenant=`; none for a name they never saw)."""
        limit, offset = query_page(request, 50)
        live = forecasters(request) if forecasters is not None else None
        if live is None:
            return {"forecasting": False, "data": []}
        scoped = scope(who, tenant)
        if asks_for_another(who, tenant):
            names = []
        elif scoped is None:
            names = live.tenants()
        else:
            names = [scoped] if not who.is_admin or scoped in live.tenants() else []
        page = names[offset:offset + limit]
        return {"forecasting": True, "data": [live.tenant_status(name) for name in page],
                "num_tenants": len(names), "has_more": offset + len(page) < len(names),
                "offset": offset, "limit": limit}

    @router.get("/v1/traces/export")
    async def export_matching(request: Request, who: Viewer = Depends(viewer), agent: str | None = None,
                              tenant: str | None = None) -> Response:
        """Every session the filters of `/v1/traces/sessions` take, merged into one trace.
        The sessions are gathered, and their left-out steps counted, in a worker thread that
        stops once the client left (`unless_client_leaves`)."""
        where = session_filter(request, who, agent, tenant)
        path = path_of(request)

        def gather(stop) -> tuple[list[tuple[str, str]], int]:
            keys = [] if path is None or where is None else matching_session_keys(path, where, stop)
            return keys, (num_left_out(path, keys, stop) if keys else 0)
        gathered = await unless_client_leaves(request, gather, READ_STOPPED)
        if isinstance(gathered, Response):
            return gathered
        keys, left_out = gathered

        def note(counts: ExportCounts) -> str:   # the sessions the file holds lines of
            return (f"stepahead: {counted(counts.num_sessions_written, 'session')}"
                    + ("" if who.is_admin else f" of tenant {who.tenant}")
                    + (f"; {left_out} failed step(s) left out (refused, nothing generated)" if left_out else ""))
        lines = export_sessions_lines(path, keys, note) if keys else iter([header_line(note(ExportCounts()))])
        return StreamingResponse(in_chunks(lines), media_type="application/x-ndjson",
                                 headers={"content-disposition": 'attachment; filename="sessions.jsonl"',
                                          LEFT_OUT_HEADER: str(left_out)})

    def session_detail(session: str, request: Request, who: Viewer, tenant: str | None, stop) -> dict:
        """The session and a page of its steps: from `offset`, or, when `request_id` names
        one of its steps, the page holding that step (`request_step` says where it is)."""
        limit, offset = query_page(request, 200)
        path = path_of(request)
        found = resolve(path, who, session, tenant, stop)
        request_id = request.query_params.get("request_id") or None
        step = None if request_id is None else request_step(path, found["tenant"], found["session"], request_id)
        if step is not None:
            offset = step["offset"] - step["offset"] % limit   # the pages `offset` walks, one of them
        return {"session": found, "request_step": step,
                "steps": list_steps(path, found["tenant"], found["session"], limit=limit, offset=offset)}

    def content(session: str, index: str, request: Request, who: Viewer, tenant: str | None, stop) -> dict:
        if not (index.isascii() and index.isdigit() and len(index) <= 18):   # SQLite integers are 64-bit
            raise HTTPException(404, f"No step '{index}' in session '{session}'.")
        path = path_of(request)
        found = resolve(path, who, session, tenant, stop)
        session = found["session"]
        captured = step_content(path, found["tenant"], session, int(index))
        if captured is None and not has_step(path, found["tenant"], session, int(index)):
            raise HTTPException(404, f"No step '{index}' in session '{session}'.")
        if captured is None:
            raise HTTPException(404, f"Step {index} of session '{session}' has no captured "
                                     "content (tracing.capture_content was off: `stepahead serve --capture-content` "
                                     "or [tracing] capture_content = true keeps it).")
        return captured

    def export(session: str, request: Request, who: Viewer, tenant: str | None, stop) -> Response:
        path = path_of(request)
        found = resolve(path, who, session, tenant, stop)
        session = found["session"]
        return StreamingResponse(   # named `<id>.jsonl`, the id whole in `filename*` (export_filename)
            in_chunks(export_lines(path, found["tenant"], session)), media_type="application/x-ndjson",
            headers={"content-disposition": export_disposition(session),
                     LEFT_OUT_HEADER: str(num_left_out(path, [(found["tenant"], session)]))})

    def named(tail: str, request: Request) -> SessionPath | None:
        """What the path names (session_path: an id may hold `/`, sent as `%2F` or plain);
        None for no id at all (`/v1/traces/sessions/`)."""
        return parse_session_path(tail, request.scope.get("raw_path")) if tail else None

    # NOTE: one route per method for a session and its resources: the tail takes ids with
    # `/` (and newlines) in them, which `{session}` did not, and session_path splits it.
    session_route = session_tail_route("/v1/traces/sessions/")

    async def session_get(tail: str, request: Request, who: Viewer = Depends(viewer),
                          tenant: str | None = None) -> dict | Response:
        """`{id}`: the session and a page of its steps (`?request_id=`: the page holding
        that request's step); `{id}/steps/{n}/content`: a step's
        messages; `{id}/export`: the session as stepahead-trace/1 JSONL. Found (`resolve`)
        in a worker thread that stops once the client left (`unless_client_leaves`)."""
        target = named(tail, request)
        if target is None:
            return RedirectResponse(request.url.replace(path=request.url.path.rstrip("/")), 307)
        answer = {"export": export, "content": lambda session, *rest: content(session, target.step, *rest)}.get(
            target.resource, session_detail)
        return await unless_client_leaves(request, lambda stop: answer(target.session, request, who, tenant, stop),
                                          READ_STOPPED)

    def delete_session(tail: str, request: Request, who: Viewer = Depends(viewer),
                       tenant: str | None = None) -> dict:
        """Delete a session the caller can see, with its steps and captured content."""
        target = named(tail, request)
        if target is None or "DELETE" not in SESSION_METHODS[target.resource]:   # SessionTailRoute's 405 first
            raise method_not_allowed(allowed_methods(tail, request.scope.get("raw_path")))
        path = path_of(request)
        found = resolve(path, who, target.session, tenant)
        try:   # one session: one transaction, all or none
            num_steps = delete_sessions(path, [(found["tenant"], found["session"])])
        except StoreBusy as exc:
            raise HTTPException(503, {"message": f"The trace store {exc}; nothing was deleted, try again shortly.",
                                      "code": "trace_store_unavailable"}, {"Retry-After": "1"}) from None
        return {"id": found["session"], "object": "trace.session.deleted", "deleted": True,
                "tenant": found["tenant"], "num_steps": num_steps}

    # one route class for both: a 405 on the tail lists its resource's methods (session_route)
    for endpoint, method in ((session_get, "GET"), (delete_session, "DELETE")):
        router.add_api_route(session_route, endpoint, methods=[method], response_model=None,
                             route_class_override=SessionTailRoute)

    add_viewer_page(router)

    # NOTE: the gateway's Starlette routes answer HEAD wherever they answer GET (headers, no
    # body: uvicorn drops it); FastAPI's routes do not unless told, so they are told here.
    for route in router.routes:
        if "GET" in route.methods:
            route.methods.add("HEAD")
    return router
