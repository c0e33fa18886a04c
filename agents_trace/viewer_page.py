"""The trace viewer's page (`/ui`) and its assets (`/ui/static/{name}`): files of the
package, served as they are.

Invariants: they hold no data and need no key (every data request the page makes sends
one); only the files named in `STATIC_FILES` are served, any other name is a 404; each
answer carries the viewer's security headers (viewer_headers: a strict CSP, never framed,
nosniff).
"""
from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, Response

from agents_trace.viewer_headers import viewer_headers

SCRIPTS = ("dom.js", "charts.js", "address.js", "list_sort.js", "list.js", "session.js", "session_live.js",
           "app.js")   # index.html's order
STATIC_FILES = {**{name: "text/javascript; charset=utf-8" for name in SCRIPTS}, "app.css": "text/css; charset=utf-8"}


def _static(name: str) -> str:
    return resources.files("agents_trace").joinpath("static", name).read_text("utf-8")


def add_viewer_page(router: APIRouter) -> None:
    """Add `/ui` and `/ui/static/{name}` to `router`."""
    @router.get("/ui", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers=viewer_headers())

    @router.get("/ui/static/{name}")
    def asset(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(404, "No such file.")
        return Response(_static(name), media_type=STATIC_FILES[name], headers=viewer_headers())
