"""The security headers of the trace viewer's page (`/ui`) and its static files.

The page asks for an API key (kept in the tab's sessionStorage), so it is locked down as
far as it still works:
- `Content-Security-Policy`: scripts and styles only from the gateway's own static files
  (`/ui/static/app.js`, `app.css`: no inline script, style or event handler, no eval),
  data only from the gateway's own API (`fetch` of `/v1/traces/...`), images only `data:`
  URLs (the page's empty icon, `<link rel="icon" href="data:,">`, so the browser asks for
  no `/favicon.ico`, which the gateway has not: a `data:` image requests nothing);
  nothing else (no plugins, fonts, frames, workers, `<base>`, form posts: its forms are
  handled in script). Downloads are `blob:` URLs opened by a
  link, which no directive restricts;
- it is never framed (`frame-ancestors 'none'`, and `X-Frame-Options: DENY` for
  browsers without CSP 2): no clickjacking of the key form;
- `X-Content-Type-Options: nosniff` (a file is only what its media type says),
  `Referrer-Policy: no-referrer` (a session id in the page's URL never leaves it),
  `Cache-Control: no-store`.
A change to static/ that needs more (an inline script, another origin) must change
this policy too: the browser test (tests/agents_trace/test_viewer_page.py) fails on any
CSP violation in the console.
"""
from __future__ import annotations

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
    "img-src data:", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"))
_HEADERS = (("content-security-policy", CONTENT_SECURITY_POLICY), ("x-frame-options", "DENY"),
            ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer"),
            ("cache-control", "no-store"))


def viewer_headers() -> dict[str, str]:
    """The headers every answer of `/ui` and `/ui/static/*` carries (a new dict each call)."""
    return dict(_HEADERS)
