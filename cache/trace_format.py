"""Reading and writing agent request traces (`stepahead-trace/1`, and Mooncake as-is).

One record per LLM call, in arrival order (see shared/TRACE_FORMAT.md). The cache
simulator, the replay harness, the benchmarks, the workload generator and the trace
store's export all go through this module, so the format has exactly one reader and one
writer.

The reader refuses a line whose time goes back (equal times are fine): every reader
replays lines in file order, so an unsorted trace would be simulated or replayed in an
order that never happened, with other hit rates and no word of it. Every writer writes
in arrival order (the workload generator sorts, the trace store's export merges by
arrival time, Mooncake files are sorted).

Each field is read by trace_fields.py (its type checked there); TraceFormatError and
MAX_TOKENS_PER_CALL come from there and are imported from here as ever.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from cache.trace_fields import (MAX_TOKENS_PER_CALL, TraceFormatError, optional_list, optional_messages,
                                optional_str, optional_time, optional_tools, require_time, require_tokens)
from cache.trace_input import trace_text

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


class BlockSizeConflict(TraceFormatError):
    """The trace's header names another block size than the one the reader was asked to
    read it with: its hash ids stand for blocks of the header's size, and reading them
    as blocks of another would make up (or hide) shared prefixes."""


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
    # the request's OpenAI `tools` and `tool_choice`, sent with `messages` (extensions)
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    # seconds from the end of the session's previous response to this arrival: the tool run
    # or user think time between them (an extension; None: not known, see docs/replay.md)
    gap_s: float | None = None

    def to_json(self) -> dict:
        row: dict = {"t": round(self.t, 6), "tenant": self.tenant}
        if self.session is not None:
            row["session"] = self.session
        if self.after is not None:
            row["after"] = self.after
        if self.gap_s is not None:
            row["gap_s"] = round(self.gap_s, 6)
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
        if self.tools is not None:
            row["tools"] = self.tools
        if self.tool_choice is not None:
            row["tool_choice"] = self.tool_choice
        return row


def parse_record(row: dict, line_no: int, block_size: int) -> TraceRecord:
    """One JSON object (stepahead-trace/1 or Mooncake) as a TraceRecord. Every field
    has its documented type (TRACE_FORMAT.md), else TraceFormatError naming the line:
    times (and `gap_s`) are finite and non-negative, token counts integers from 0 to
    MAX_TOKENS_PER_CALL, `hash_ids` a list of integers, one per block of the input
    (Mooncake lines too, with their blocks of 512), `tools` a list of objects,
    `tool_choice` a string or an object; an optional field may be absent or null. A line
    with neither `t` nor `timestamp` is refused as what it is instead (a tool sequence, a
    Mooncake line without its time), not as a bad value of a field it never had."""
    if "timestamp" in row and "t" not in row:  # Mooncake: ms, input_length, output_length
        record = _with_block_count(TraceRecord(
            t=require_time(row, "timestamp", "milliseconds", line_no) / 1000.0,
            input_tokens=require_tokens(row, "input_length", line_no),
            output_tokens=require_tokens(row, "output_length", line_no),
            hash_ids=optional_list(row, "hash_ids", int, line_no)), line_no, block_size)
        record.hash_ids = record.hash_ids or None   # checked first: an empty list is one only for no tokens
        return record
    if "t" not in row:
        raise TraceFormatError(_no_arrival_time(row, line_no))
    tenant = optional_str(row, "tenant", line_no)
    messages = optional_messages(row, line_no)
    tools, tool_choice = optional_tools(row, line_no)
    record = TraceRecord(
        t=require_time(row, "t", "seconds", line_no), input_tokens=require_tokens(row, "input_tokens", line_no),
        output_tokens=require_tokens(row, "output_tokens", line_no),
        tenant=DEFAULT_TENANT if tenant is None else tenant, session=optional_str(row, "session", line_no),
        after=optional_str(row, "after", line_no),
        tool_calls=list(optional_list(row, "tool_calls", str, line_no) or []),
        hash_ids=optional_list(row, "hash_ids", int, line_no), messages=messages,
        service_tier=optional_str(row, "service_tier", line_no), tools=tools, tool_choice=tool_choice,
        gap_s=optional_time(row, "gap_s", "seconds", line_no))
    return _with_block_count(record, line_no, block_size)


def _no_arrival_time(row: dict, line_no: int) -> str:
    """The error for a line with neither `t` nor `timestamp`: what the line is instead
    (a tool sequence, a Mooncake line without its time), not a complaint about the value
    of a field it never had."""
    if "steps" in row:
        return (f"line {line_no}: not a request trace: a tool-sequence line ('steps'), with no 't' or 'timestamp' "
                "(python -m agents_trace.predict.eval reads tool sequences)")
    if "input_length" in row or "output_length" in row:
        return f"line {line_no}: a Mooncake line without 'timestamp' (its arrival, in milliseconds)"
    return (f"line {line_no}: not a request: no 't' (stepahead-trace/1: arrival in seconds) or 'timestamp' "
            "(Mooncake: arrival in milliseconds)")


def _with_block_count(record: TraceRecord, line_no: int, block_size: int) -> TraceRecord:
    """`record`, whose `hash_ids` (when given) name one block per `block_size` input tokens."""
    if record.hash_ids is not None:
        expected = -(-record.input_tokens // block_size)
        if len(record.hash_ids) != expected:
            raise TraceFormatError(
                f"line {line_no}: {len(record.hash_ids)} hash_ids for {record.input_tokens} "
                f"tokens; expected {expected} blocks of {block_size}")
    return record


def _header(row: dict, line_no: int) -> TraceHeader:
    """The header line's fields: a known format, an integer block size from 1 to
    MAX_TOKENS_PER_CALL (as the simulator's --block-size), and times in seconds (the only
    unit the readers apply)."""
    if row.get("format") != FORMAT_NAME:
        raise TraceFormatError(f"line {line_no}: unknown trace format {row.get('format')!r}")
    block_size = row.get("block_size", MOONCAKE_BLOCK_SIZE)
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
        raise TraceFormatError(f"line {line_no}: 'block_size' must be a positive integer")
    if block_size > MAX_TOKENS_PER_CALL:
        raise TraceFormatError(f"line {line_no}: 'block_size' is {block_size}, more than the "
                               f"{MAX_TOKENS_PER_CALL:,} tokens a call may have")
    if row.get("time_unit", "s") != "s":
        raise TraceFormatError(f"line {line_no}: 'time_unit' must be \"s\" (seconds), "
                               f"got {row.get('time_unit')!r}")
    return TraceHeader(block_size, "s", str(row.get("note", "")))


def iter_trace(stream: IO[str], block_size: int | None = None) -> tuple[TraceHeader, Iterator[TraceRecord]]:
    """Header and the records of a trace stream. `block_size` is the block size of a
    trace without a header (None: Mooncake's 512); a header that names another is a
    BlockSizeConflict, raised here, before any record is read. The records' times never
    go back (TraceFormatError naming the line)."""
    lines = enumerate(stream, start=1)
    header = TraceHeader(block_size=MOONCAKE_BLOCK_SIZE if block_size is None else block_size)
    first: tuple[int, dict] | None = None
    for line_no, line in lines:
        if not line.strip():
            continue
        row = _load(line, line_no)
        if _is_header(row):
            header = _header(row, line_no)
            if block_size is not None and header.block_size != block_size:
                raise BlockSizeConflict(f"line {line_no}: the header says its hash_ids name blocks of "
                                        f"{header.block_size} tokens, not {block_size}")
        else:
            first = (line_no, row)
        break

    def rows() -> Iterator[tuple[int, dict]]:
        if first is not None:
            yield first
        for line_no, line in lines:
            if line.strip():
                row = _load(line, line_no)
                if _is_header(row):
                    raise TraceFormatError(_second_header(line_no))
                yield line_no, row

    def records() -> Iterator[TraceRecord]:
        previous: tuple[int, float] | None = None   # (line, time) of the last record
        for line_no, row in rows():
            record = parse_record(row, line_no, header.block_size)
            if previous is not None and record.t < previous[1]:
                raise TraceFormatError(_time_goes_back(row, line_no, record.t, *previous))
            previous = (line_no, record.t)
            yield record

    return header, records()


def _is_header(row: dict) -> bool:
    """A line is a header when it names the format and is no request: a request line
    with an extra `format` field stays a request, on the first line as below it."""
    return "format" in row and "t" not in row and "timestamp" not in row


def _second_header(line_no: int) -> str:
    """The error for a header below the first line: most often two traces joined with
    `cat`, whose times each count from their own start, so they cannot be read as one."""
    return (f"line {line_no}: a second trace header; a header may only be the first line (two traces "
            "joined with cat? each one's times count from its own start: keep one header, shift "
            "the second trace's 't' and sort the lines by 't')")


def _time_goes_back(row: dict, line_no: int, t_s: float, previous_line_no: int, previous_t_s: float) -> str:
    """The error for a line that arrives before the line above it, in the line's own field and unit."""
    key, scale, unit = ("timestamp", 1000.0, "ms") if "timestamp" in row and "t" not in row else ("t", 1.0, "s")
    return (f"line {line_no}: {key!r} is {t_s * scale:g} {unit}, before line {previous_line_no}'s "
            f"{previous_t_s * scale:g} {unit}: a trace's lines are in arrival order (sort it by {key!r})")


def _load(line: str, line_no: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"line {line_no}: not JSON ({exc.msg})") from None
    except ValueError:   # an integer past Python's 4,300 digits (QA202 F2)
        raise TraceFormatError(f"line {line_no}: not a trace line (a number of over 4,300 digits)") from None
    except RecursionError:
        raise TraceFormatError(f"line {line_no}: not a trace line (JSON nested too deep)") from None
    if not isinstance(row, dict):
        raise TraceFormatError(f"line {line_no}: expected a JSON object")
    return row


def read_trace(path: str | Path, block_size: int | None = None) -> tuple[TraceHeader, list[TraceRecord]]:
    """The header and every record of a trace file, or of stdin when `path` is "-"
    (`block_size`: as in `iter_trace`); TraceFormatError (a ValueError) when its content is
    not a trace, OSError when it cannot be read. UTF-8 text, a leading byte-order mark
    skipped (a file saved so by an editor loads, as the gateway's config does); a
    compressed file is refused as one, naming its compression."""
    with trace_text(path) as stream:
        try:
            header, records = iter_trace(stream, block_size)
            return header, list(records)
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"not UTF-8 text ({exc.reason})") from None


def read_trace_or_why(path: str | Path) -> tuple[TraceHeader, list[TraceRecord]] | str:
    """`read_trace(path)`, or why not in one line ("cannot read PATH: ..."): for a tool
    that reports it as its error."""
    try:
        return read_trace(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    except TraceFormatError as exc:
        return f"cannot read {path}: {exc}"


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
