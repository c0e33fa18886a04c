"""String formats a structured reply is held to: those clients parse into typed values
(pydantic's `datetime`, `date`, `time`, `UUID`, `IPv4Address`, and `EmailStr`'s shape),
where a string the model wrote freely ("tomorrow") fails the client's parse even though
JSON Schema only annotates `format`.

The reader (`json_prefix`) holds such a string back until it closes and checks it there;
the filler (`json_filling`) checks what the model gives and falls back to a placeholder of
the format. Other formats (uri, hostname, duration, …) stay annotations, as before.

Invariant: `fits_format(PLACEHOLDERS[f], f)` for every checked format `f`; a string that
fits is one `datetime`/`date`/`time.fromisoformat`, `uuid.UUID` and `ipaddress` read;
`normalized` returns only strings that fit.
"""
from __future__ import annotations

import datetime
import ipaddress
import re
import uuid
from collections.abc import Callable

from jsonschema import FormatChecker

from gateway.json_patterns import usable_pattern

# Strict shapes (RFC 3339, as JSON Schema defines these formats: a time carries its
# offset; ASCII digits only): accepting less than a client would is safe (the model is asked again, or the
# placeholder is used), accepting more is not.
_SHAPES = {
    "date-time": re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})", re.ASCII),
    "date": re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII),
    "time": re.compile(r"\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})", re.ASCII),
    "uuid": re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    "ipv4": re.compile(r"\d{1,3}(\.\d{1,3}){3}", re.ASCII),
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


_ORDINAL = re.compile(r"(?<=\d)(st|nd|rd|th)\b", re.IGNORECASE)
_DATE_FORMS = ("%m/%d/%Y", "%Y/%m/%d", "%d.%m.%Y", "%B %d %Y", "%b %d %Y", "%d %B %Y", "%d %b %Y",
               "%A %B %d %Y", "%A %d %B %Y")
_CLOCK = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*([ap])\.?m\.?", re.IGNORECASE)


def _date(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text[:10])
    except ValueError:
        pass
    plain = " ".join(_ORDINAL.sub("", text).replace(",", " ").split())
    for form in _DATE_FORMS:
        try:
            return datetime.datetime.strptime(plain, form).date()
        except ValueError:
            continue
    raise ValueError(text)


def _time(text: str) -> datetime.time:
    clock = _CLOCK.fullmatch(text)
    if clock is not None:   # "10am", "3:30 p.m."
        hour, minute, second, half = int(clock[1]), int(clock[2] or 0), int(clock[3] or 0), clock[4].lower()
        if not 1 <= hour <= 12:
            raise ValueError(text)
        return datetime.time(hour % 12 + (12 if half == "p" else 0), minute, second)
    if "T" in text:   # a date-time: its time
        text = text.split("T", 1)[1]
    return datetime.time.fromisoformat(text.replace("Z", "+00:00"))


def _with_offset(value: datetime.datetime | datetime.time) -> str:
    """ISO text with the value's offset, "Z" (UTC) for a value written without one."""
    return value.isoformat() + ("Z" if value.utcoffset() is None else "")


_NORMALIZERS = {
    "date-time": lambda text: _with_offset(datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))),
    "date": lambda text: _date(text).isoformat(),
    "time": lambda text: _with_offset(_time(text)),
    "uuid": lambda text: str(uuid.UUID(text)),
    "email": lambda text: text,
    "ipv4": lambda text: text,
}


def normalized(text: str, fmt: str) -> str | None:
    """`text` as a value of the checked format `fmt` in its strict form, read leniently
    where the meaning is plain ("3/20/2025", "March 3rd, 2025", "10:00", "10am", a UUID
    without dashes; a time or date-time without an offset is taken as UTC); None when it
    is not one."""
    text = text.strip()
    try:
        value = _NORMALIZERS[fmt](text)
    except (ValueError, OverflowError):
        return None
    return value if fits_format(value, fmt) else None


def checked_format(schema: dict) -> str | None:
    """The schema's `format` when replies are held to it, else None."""
    fmt = schema.get("format")
    return fmt if isinstance(fmt, str) and fmt in _SHAPES else None


def format_shape(fmt: str) -> str:
    """The regular expression a string of the checked format `fmt` has the shape of (in
    full: `fits_format` reads it too)."""
    return _SHAPES[fmt].pattern


def fits_format(text: str, fmt: str) -> bool:
    """Whether `text` is a value of the checked format `fmt`."""
    if _SHAPES[fmt].fullmatch(text) is None:
        return False
    try:
        _READERS[fmt](text)
    except ValueError:
        return False
    return True


def format_checker() -> FormatChecker:
    """A jsonschema format checker that holds strings to the checked formats as the
    reader and filler do (`fits_format`), and leaves other formats annotations."""
    checker = FormatChecker(formats=())
    for fmt in _SHAPES:
        checker.checks(fmt)(lambda value, fmt=fmt: not isinstance(value, str) or fits_format(value, fmt))
    return checker


def whole_string_check(schema: dict) -> Callable[[str], bool] | None:
    """How a string of `schema` is checked once whole (its typed format, its `pattern`,
    `json_patterns`: within MATCH_TIMEOUT_S, one that runs past it not matching), as a
    predicate; None for a string sent as it streams."""
    fmt, pattern = checked_format(schema), usable_pattern(schema)
    if fmt is None and pattern is None:
        return None
    return lambda text: (fmt is None or fits_format(text, fmt)) and (pattern is None or pattern.matches(text))
