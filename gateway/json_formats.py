"""String formats a structured reply is held to: those clients parse into typed values
(pydantic's `datetime`, `date`, `time`, `UUID`, `IPv4Address`, and `EmailStr`'s shape),
where a string the model wrote freely ("tomorrow") fails the client's parse even though
JSON Schema only annotates `format`.

The reader (`json_prefix`) holds such a string back until it closes and checks it there;
the filler (`json_filling`) checks what the model gives and falls back to a placeholder of
the format. Other formats (uri, hostname, duration, …) stay annotations, as before.

Invariant: `fits_format(PLACEHOLDERS[f], f)` for every checked format `f`; a string that
fits is one `datetime`/`date`/`time.fromisoformat`, `uuid.UUID` and `ipaddress` read.
"""
from __future__ import annotations

import datetime
import ipaddress
import re
import uuid

# Strict shapes (RFC 3339 for dates and times): accepting less than a client would is
# safe (the model is asked again, or the placeholder is used), accepting more is not.
_SHAPES = {
    "date-time": re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?"),
    "date": re.compile(r"\d{4}-\d{2}-\d{2}"),
    "time": re.compile(r"\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?"),
    "uuid": re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    "ipv4": re.compile(r"\d{1,3}(\.\d{1,3}){3}"),
}
_READERS = {
    "date-time": lambda text: datetime.datetime.fromisoformat(text.replace("Z", "+00:00")),
    "date": datetime.date.fromisoformat,
    "time": lambda text: datetime.time.fromisoformat(text.replace("Z", "+00:00")),
    "uuid": uuid.UUID,
    "email": str,
    "ipv4": ipaddress.IPv4Address,
}
PLACEHOLDERS = {"date-time": "1970-01-01T00:00:00Z", "date": "1970-01-01", "time": "00:00:00Z",
                "uuid": "00000000-0000-0000-0000-000000000000", "email": "user@example.com",
                "ipv4": "127.0.0.1"}


def checked_format(schema: dict) -> str | None:
    """The schema's `format` when replies are held to it, else None."""
    fmt = schema.get("format")
    return fmt if isinstance(fmt, str) and fmt in _SHAPES else None


def fits_format(text: str, fmt: str) -> bool:
    """Whether `text` is a value of the checked format `fmt`."""
    if _SHAPES[fmt].fullmatch(text) is None:
        return False
    try:
        _READERS[fmt](text)
    except ValueError:
        return False
    return True
