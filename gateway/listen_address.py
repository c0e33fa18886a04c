"""The address a gateway listens on: whether (host, port) can be bound, said in the
start's words, and the base URL a client uses there.

Invariant: `address_error` binds exactly as uvicorn will (the first address
`getaddrinfo` gives, SO_REUSEADDR) and lets go at once, so `stepahead serve` (before the
workers load the model) and `stepahead config check` refuse the same addresses, with the
same `cannot listen on HOST:PORT: REASON` line; nothing stays bound.
"""
from __future__ import annotations

import socket


def address_error(host: str, port: int) -> OSError | None:
    """The error binding (host, port) gives — taken, not an address of this machine — or
    None. Binds as uvicorn does (SO_REUSEADDR), then lets go at once (`config check` too)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:   # socket.gaierror included
        return exc
    return None


def cannot_listen(host: str, port: int, error: OSError) -> str:
    """`address_error`'s `error` in the start's words."""
    return f"cannot listen on {host}:{port}: {error.strerror or error}"


def address_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on (host, port), in one line, or None."""
    error = address_error(host, port)
    return None if error is None else cannot_listen(host, port, error)


def base_url(host: str, port: int) -> str:
    """The OpenAI base URL of a gateway listening on (host, port); an IPv6 host in brackets."""
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"
