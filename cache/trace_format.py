"""Reading and writing agent request traces (`stepahead-trace/1`, and Mooncake as-is).

One record per LLM call, in arrival order (see shared/TRACE_FORMAT.md). The cache
simulator, the replay harness, the benchmarks, the workload generator and the trace
store's export all go through this module, so the format has exactly one reader and one
writer.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

FORMAT_NAME = "stepahead-trace/1"
MOONCAKE_BLOCK_SIZE = 512
DEFAULT_TENANT = "default"


def after_tool_names(after: str | None) -> list[str]:
    """The tool names an `after` field carries ("tool:a" or "tool:a,tool:b"); empty for
    "start", "user" or no field."""
    if not after or not after.startswith("tool:"):
        return []
    names = (part.strip() for part in after.split(","))
    return [name.removeprefix("tool:") for name in names if name.removeprefix("tool:")]


class TraceFormatError(ValueError):
    """A trace line is not valid; the message names the line."""


@dataclass(frozen=True, slots=True)
class TraceHeader:
    block_size: int = MOONCAKE_BLOCK_SIZE
    time_unit: str = "s"
    note: str = ""


@dataclass(slots=True)
class TraceRecord:
    """One LLM call. Invariant: when `hash_ids` is given it has
    ceil(input_tokens / block_size) entries."""

    t: float
    input_tokens: int
    output_tokens: int
    tenant: str = DEFAULT_TENANT
    session: str | None = None
    after: str | None = None
    tool_calls: list[str] = field(default_factory=list)
    hash_ids: list[int] | None = None
    messages: list | None = None
    service_tier: str | None = None   # "flex": served after interactive work (an extension)

    def to_json(self) -> dict:
        row: dict = {"t": round(self.t, 6), "tenant": self.tenant}
        if self.session is not None:
            row["session"] = self.session
        if self.after is not None:
            row["after"] = self.after
        if self.tool_calls:
            row["tool_calls"] = list(self.tool_calls)
        row["input_tokens"] = self.input_tokens
        row["output_tokens"] = self.output_tokens
        if self.hash_ids is not None:
            row["hash_ids"] = list(self.hash_ids)
        if self.messages is not None:
            row["messages"] = self.messages
        if self.service_tier is not None:
            row["service_tier"] = self.service_tier
        return row


def _require_int(row: dict, key: str, line_no: int) -> int:
    value = row.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TraceFormatError(f"line {line_no}: {key!r} must be a non-negative integer")
    return value


def parse_record(row: dict, line_no: int, block_size: int) -> TraceRecord:
    """One JSON object (stepahead-trace/1 or Mooncake) as a TraceRecord."""
    if "timestamp" in row and "t" not in row:  # Mooncake: ms, input_length, output_length
        return TraceRecord(
            t=float(row["timestamp"]) / 1000.0,
            input_tokens=_require_int(row, "input_length", line_no),
            output_tokens=_require_int(row, "output_length", line_no),
            hash_ids=list(row.get("hash_ids") or []) or None)
    t = row.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        raise TraceFormatError(f"line {line_no}: 't' must be a number of seconds")
    record = TraceRecord(
        t=float(t), input_tokens=_require_int(row, "input_tokens", line_no),
        output_tokens=_require_int(row, "output_tokens", line_no),
        tenant=str(row.get("tenant", DEFAULT_TENANT)), session=row.get("session"),
        after=row.get("after"), tool_calls=list(row.get("tool_calls") or []),
        hash_ids=row.get("hash_ids"), messages=row.get("messages"), service_tier=row.get("service_tier"))
    if record.service_tier is not None and not isinstance(record.service_tier, str):
        raise TraceFormatError(f"line {line_no}: 'service_tier' must be a string")
    if record.hash_ids is not None:
        expected = math.ceil(record.input_tokens / block_size)
        if len(record.hash_ids) != expected:
            raise TraceFormatError(
                f"line {line_no}: {len(record.hash_ids)} hash_ids for {record.input_tokens} "
                f"tokens; expected {expected} blocks of {block_size}")
    return record


def iter_trace(stream: IO[str]) -> tuple[TraceHeader, Iterator[TraceRecord]]:
    """Header (defaulted if absent) and the records of a trace stream."""
    lines = enumerate(stream, start=1)
    header = TraceHeader()
    first: tuple[int, dict] | None = None
    for line_no, line in lines:
        if not line.strip():
            continue
        row = _load(line, line_no)
        if "format" in row:
            if row.get("format") != FORMAT_NAME:
                raise TraceFormatError(f"line {line_no}: unknown trace format {row.get('format')!r}")
            header = TraceHeader(int(row.get("block_size", MOONCAKE_BLOCK_SIZE)),
                                 str(row.get("time_unit", "s")), str(row.get("note", "")))
        else:
            first = (line_no, row)
        break

    def records() -> Iterator[TraceRecord]:
        if first is not None:
            yield parse_record(first[1], first[0], header.block_size)
        for line_no, line in lines:
            if line.strip():
                yield parse_record(_load(line, line_no), line_no, header.block_size)

    return header, records()


def _load(line: str, line_no: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"line {line_no}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise TraceFormatError(f"line {line_no}: expected a JSON object")
    return row


def read_trace(path: str | Path) -> tuple[TraceHeader, list[TraceRecord]]:
    """The header and every record of a trace file; TraceFormatError (a ValueError) when its
    content is not a trace, OSError when it cannot be read."""
    with open(path, encoding="utf-8") as stream:
        try:
            header, records = iter_trace(stream)
            return header, list(records)
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"not UTF-8 text ({exc.reason})") from None


def write_trace(stream: IO[str], records: Iterable[TraceRecord], header: TraceHeader | None = None) -> int:
    """Write a header line and the records; returns the number of records written."""
    header = header or TraceHeader()
    stream.write(json.dumps({"format": FORMAT_NAME, "block_size": header.block_size,
                             "time_unit": header.time_unit, "note": header.note}) + "\n")
    count = 0
    for record in records:
        stream.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
        count += 1
    return count
