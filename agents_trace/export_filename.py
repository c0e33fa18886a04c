"""The file name a session's export is offered under (`Content-Disposition`, RFC 6266).

A header is Latin-1 and an id may hold any character, so the name goes twice: `filename*`
(RFC 5987: `UTF-8''` and the name percent-encoded) carries the id as it is, and `filename`
an ASCII stand-in for clients that know only that one (accents dropped, `ünï` is `uni`,
anything else outside `[A-Za-z0-9._-]` a `_`). Invariants: the header is printable ASCII
whatever the id (no CR, LF, NUL or quote can end it or start another header); the name ends
in `.jsonl` exactly once (an id that already ends in `.jsonl`, `run.jsonl`, is not given a
second one: QA194 F4's `_n_______d_.jsonl.jsonl`); the name holds no path separator and no
control or bidirectional-text character (each a `_`), so it cannot name a folder or read
backwards; it is at most MAX_NAME_CHARS characters before the extension; `filename*` is
left out where it would say what `filename` says.
"""
from __future__ import annotations

import unicodedata
from urllib.parse import quote

EXTENSION = ".jsonl"
MAX_NAME_CHARS = 200   # under the 255 bytes most file systems allow, with the extension (ASCII)
ASCII_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
ATTR_CHARS = "!#$&+-.^_`|~"   # RFC 5987 attr-char besides letters and digits: sent as they are


def _stem(session: str) -> str:
    """The id without a final `.jsonl` (any case), so the name gets one only."""
    return session[:-len(EXTENSION)] if session.lower().endswith(EXTENSION) else session


def _cut(name: str, max_bytes: int | None = None) -> str:
    name = name[:MAX_NAME_CHARS]
    if max_bytes is not None:
        while len(name.encode("utf-8")) > max_bytes:
            name = name[:-1]
    return name


def unicode_file_name(session: str) -> str:
    """The name `filename*` carries: the id, each separator (`/`, `\\`) and character that is
    not printable (controls, bidi) a `_`, cut to MAX_NAME_CHARS (and 240 UTF-8 bytes)."""
    stem = "".join(ch if ch.isprintable() and ch not in "/\\" else "_" for ch in _stem(session))
    stem = _cut(stem, 240).lstrip(".") or "session"
    return stem + EXTENSION


def ascii_file_name(session: str) -> str:
    """The name `filename` carries: `unicode_file_name`'s stem without accents (NFKD, its
    combining marks dropped), each character outside ASCII_SAFE a `_`."""
    plain = "".join(ch for ch in unicodedata.normalize("NFKD", _stem(session)) if not unicodedata.combining(ch))
    stem = _cut("".join(ch if ch in ASCII_SAFE else "_" for ch in plain)).lstrip(".") or "session"
    return stem + EXTENSION


def export_disposition(session: str) -> str:
    """`attachment; filename="<ascii>"` and, where the id's own name differs from it,
    `; filename*=UTF-8''<percent-encoded name>`."""
    fallback, name = ascii_file_name(session), unicode_file_name(session)
    header = f'attachment; filename="{fallback}"'
    return header if name == fallback else header + "; filename*=UTF-8''" + quote(name, safe=ATTR_CHARS)
