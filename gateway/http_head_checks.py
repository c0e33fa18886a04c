"""Checks of a request's head that the gateway's HTTP/1.1 connections make before it
reaches the app (gateway/http_protocol.py): whether it announces a body, a transfer
coding other than chunked, and its `Host` header as RFC 9112 §3.2 asks (one, and on
HTTP/1.1 at least one, a valid host[:port]). Pure functions of the head's fields."""
from __future__ import annotations

import re

# RFC 9110 §7.2: uri-host [":" port]; uri-host an IP literal or a reg-name (which may be empty)
HOST = re.compile(rb"(?:\[[0-9A-Za-z._~!$&'()*+,;=:%-]+\]|(?:[0-9A-Za-z._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)(?::[0-9]*)?")


def has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers announce a body (a non-zero Content-Length, or any
    Transfer-Encoding)."""
    for name, value in headers:
        if name.lower() == b"transfer-encoding" or (name.lower() == b"content-length"
                                                     and value.strip().lstrip(b"0") != b""):
            return True
    return False


def unknown_transfer_coding(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The first transfer coding other than `chunked` the headers name, or None."""
    for name, value in headers:
        if name.lower() == b"transfer-encoding":
            for part in value.split(b","):
                coding = part.strip().lower()
                if coding and coding != b"chunked":
                    return coding.decode("latin-1")
    return None


def host_problem(headers: list[tuple[bytes, bytes]], http_version: str) -> str | None:
    """Why a request's `Host` header fails RFC 9112 §3.2 (none on HTTP/1.1, two, or an
    invalid value), or None."""
    hosts = [value.strip(b" \t") for name, value in headers if name.lower() == b"host"]
    if len(hosts) > 1:
        return f"The request has {len(hosts)} Host headers; send one."
    if not hosts:
        return "The request has no Host header, which HTTP/1.1 requires." if http_version == "1.1" else None
    return None if HOST.fullmatch(hosts[0]) else "The request's Host header is not a valid host[:port]."
