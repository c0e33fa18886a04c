"""A chat call's request parameters as span attributes (OpenTelemetry GenAI conventions:
`gen_ai.request.*`, `gen_ai.output.type`, `server.address`/`server.port`).

Invariant: an attribute states only what the client sent, as it sent it: an int OTLP
cannot encode is left off (never clamped), `n` counts only when not 1, the server's
address only from a well-formed Host header, and then always with its port (the Host's,
else the request scheme's default: the conventions require `server.port` whenever
`server.address` is set); `gen_ai.output.type` only when the request names a format.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents_trace import semconv as sc

# (body field, attribute): the first field sent names an attribute
_REQUEST_PARAMS = (("max_completion_tokens", sc.REQUEST_MAX_TOKENS), ("max_tokens", sc.REQUEST_MAX_TOKENS),
                   ("temperature", sc.REQUEST_TEMPERATURE), ("top_p", sc.REQUEST_TOP_P), ("seed", sc.REQUEST_SEED),
                   ("frequency_penalty", sc.REQUEST_FREQUENCY_PENALTY),
                   ("presence_penalty", sc.REQUEST_PRESENCE_PENALTY), ("n", sc.REQUEST_CHOICE_COUNT))
OTLP_INT_RANGE = range(-2**63, 2**63)   # an OTLP int attribute is an int64
DEFAULT_PORTS = {"http": 80, "https": 443}
# response_format / text.format type -> the conventions' `gen_ai.output.type`
_OUTPUT_TYPES = {"json_object": "json", "json_schema": "json", "text": "text"}
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]{1,253})(?::([0-9]{1,5}))?")   # a name or IP, a port


def output_type(body: Mapping[str, Any]) -> str | None:
    """`gen_ai.output.type` for the format the request asks for (`response_format`; a
    Responses request's `text.format` arrives as it): "json" for `json_object` and
    `json_schema`, "text" for `text`; None when it names none (or one we do not know)."""
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    return _OUTPUT_TYPES.get(kind) if isinstance(kind, str) else None


def request_params(body: Mapping[str, Any], headers: Mapping[str, str],
                   scheme: str = "http") -> tuple[tuple[str, Any], ...]:
    """The request's parameters as span attributes (GenAI conventions: `gen_ai.request.*`,
    `gen_ai.output.type`; `server.address` and `server.port` from a well-formed Host
    header, the port, when the Host names none, `scheme`'s default). An int outside
    OTLP_INT_RANGE (`max_tokens` 10**30: refused later, but traced) is dropped, not
    clamped: a clamped number would state a request nobody sent, and OTLP cannot encode
    the real one (the exporter would log a traceback per span); `max_tokens` then says
    nothing, rather than quote a `max_tokens` sent beside the `max_completion_tokens`
    that wins. `n` counts (`choice.count`) only when not 1, as the conventions ask."""
    params: dict[str, Any] = {}
    for field, name in _REQUEST_PARAMS:
        value = body.get(field)
        if name not in params and isinstance(value, (int, float)) and not isinstance(value, bool):
            params[name] = value if isinstance(value, float) or value in OTLP_INT_RANGE else None
    if params.get(sc.REQUEST_CHOICE_COUNT) == 1:
        del params[sc.REQUEST_CHOICE_COUNT]
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else ()
    if stops and all(isinstance(text, str) for text in stops):
        params[sc.REQUEST_STOP_SEQUENCES] = stops
    host = headers.get("host")
    found = _HOST.fullmatch(host) if isinstance(host, str) else None
    if found is not None and int(found[2] or 0) < 2**16:   # else malformed: the client's text, not ours to quote
        port = int(found[2]) if found[2] is not None else DEFAULT_PORTS.get(scheme.lower(), DEFAULT_PORTS["http"])
        params.update({sc.SERVER_ADDRESS: found[1].strip("[]").lower(), sc.SERVER_PORT: port})
    params[sc.OUTPUT_TYPE] = output_type(body)
    return tuple((name, value) for name, value in params.items() if value is not None)
