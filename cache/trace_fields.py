"""The per-field readers of a trace line (`stepahead-trace/1`, Mooncake): each returns the
field's value with its documented type (shared/TRACE_FORMAT.md, docs/replay.md) or raises
TraceFormatError naming the line and the field. An optional field may be absent or null
(None). trace_format.py assembles a record from them.
"""
from __future__ import annotations

import math

# More tokens than any model's context by far: a count past it is a broken line, which
# the simulator and replay would otherwise try to build (blocks, token ids) until memory ran out.
MAX_TOKENS_PER_CALL = 10_000_000


class TraceFormatError(ValueError):
    """A trace line is not valid; the message names the line."""


def require_tokens(row: dict, key: str, line_no: int) -> int:
    """A token count: an integer from 0 to MAX_TOKENS_PER_CALL (not a boolean)."""
    value = row.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TraceFormatError(f"line {line_no}: {key!r} must be a non-negative integer")
    if value > MAX_TOKENS_PER_CALL:
        raise TraceFormatError(f"line {line_no}: {key!r} is {value}, more than the {MAX_TOKENS_PER_CALL:,} "
                               "tokens a call may have")
    return value


def require_time(row: dict, key: str, unit: str, line_no: int) -> float:
    """A finite, non-negative number (not a boolean): an arrival time or a duration."""
    value = row.get(key)
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:   # an integer past float's range
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise TraceFormatError(f"line {line_no}: {key!r} must be a non-negative number of {unit}")
    return number


def optional_time(row: dict, key: str, unit: str, line_no: int) -> float | None:
    """A finite, non-negative number of `unit` (as `require_time`), or None when absent or null."""
    return None if row.get(key) is None else require_time(row, key, unit, line_no)


def optional_str(row: dict, key: str, line_no: int) -> str | None:
    """A string, or None when the field is absent or null."""
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise TraceFormatError(f"line {line_no}: {key!r} must be a string")
    return value


def optional_list(row: dict, key: str, item_type: type, line_no: int) -> list | None:
    """A list whose items are all `item_type` (never a boolean), or None when absent or null."""
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, item_type) and not isinstance(item, bool)
                                              for item in value):
        what = "integers" if item_type is int else "strings"
        raise TraceFormatError(f"line {line_no}: {key!r} must be a list of {what}")
    return value


def optional_messages(row: dict, line_no: int) -> list | None:
    """`messages`: a list (its items are the OpenAI messages, not checked here), or None."""
    messages = row.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise TraceFormatError(f"line {line_no}: 'messages' must be a list")
    return messages


def optional_tools(row: dict, line_no: int) -> tuple[list[dict] | None, str | dict | None]:
    """`tools`, a list of objects, and `tool_choice`, a string or an object; None when absent or null."""
    tools, tool_choice = row.get("tools"), row.get("tool_choice")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(tool, dict) for tool in tools)):
        raise TraceFormatError(f"line {line_no}: 'tools' must be a list of objects")
    if tool_choice is not None and not isinstance(tool_choice, (str, dict)):
        raise TraceFormatError(f"line {line_no}: 'tool_choice' must be a string or an object")
    return tools, tool_choice
