"""Tracing configuration: the `[tracing]` table of the gateway's TOML file.

Invariants: a `TraceConfig` is frozen and already validated (positive sizes and timeouts,
an export timeout of at most a day, a known OTLP protocol; from the file, integers within
TOML's 64 bits and finite numbers, as in every config table: `toml_int_problem`); a None
field means "not set here", and then the standard `OTEL_*` environment variables decide
(OTLP endpoint, protocol, headers, whether message content is captured) or the documented
default applies (store path). A value taken from those variables is checked as the file's
is (`resolved_otlp_protocol`): a bad one is a `TraceConfigError` naming the variable. The
OTLP exporter's numbers (timeout, queue and batch sizes, attribute length) follow the same
order: the file's value, else the standard variable, else the built-in default
(`resolved_otlp_*`). The service name is the other way round: the
standard variables win over `service_name` (`resolved_service_name`). Message content is
never captured unless `capture_content` is true, or unset with
$OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asking for it.
"""
from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cache.error_text import did_you_mean

OTLP_PROTOCOLS = ("http/protobuf", "grpc")
STORE_PATH_ENV = "STEPAHEAD_TRACE_DB"
STORE_FILE_NAME = "traces.sqlite3"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_CONTENT_ON = ("true", "span_only", "event_only", "span_and_event")   # the variable's values that ask for it
OTLP_PROTOCOL_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")   # first set wins
DEFAULT_OTLP_PROTOCOL = "http/protobuf"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
RESOURCE_ATTRIBUTES_ENV = "OTEL_RESOURCE_ATTRIBUTES"
# The OTLP exporter's numbers: [tracing] key, else the first set of these standard variables, else the default.
OTLP_TIMEOUT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")   # seconds, as the Python SDK reads them
OTLP_QUEUE_SIZE_ENVS = ("OTEL_BSP_MAX_QUEUE_SIZE",)
OTLP_BATCH_SIZE_ENVS = ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE",)
ATTRIBUTE_LENGTH_ENVS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
DEFAULT_OTLP_EXPORT_TIMEOUT_S = 10.0
# An export request waits a day at most: far past any collector's answer, and far under what a
# socket's timeout can hold (about 9.2e9 s; past it every export fails, each span dropped).
MAX_OTLP_EXPORT_TIMEOUT_S = 86_400.0
TOML_INT_MIN, TOML_INT_MAX = -2**63, 2**63 - 1   # TOML's integers are 64-bit; tomllib loads any
DEFAULT_OTLP_MAX_QUEUE_SIZE = 2048
DEFAULT_OTLP_MAX_EXPORT_BATCH_SIZE = 512
# 64 KiB characters per exported attribute value (a conversation in `gen_ai.input.messages`):
# about 16k tokens of context, a common backend's own cap on a field (Honeycomb's is 64 KB),
# and 2 x 64 KiB x 4 bytes (content attributes, worst-case UTF-8) stays far under one export
# request's byte budget (otlp_export_bounds.MAX_REQUEST_BYTES), so no span is too big to send.
DEFAULT_OTLP_ATTRIBUTE_MAX_LENGTH = 64 * 1024


class TraceConfigError(ValueError):
    """The `[tracing]` table is invalid; the message names the key."""


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """Everything the tracer, its exporters and its store need.

    `store_path` None means $STEPAHEAD_TRACE_DB, else `traces.sqlite3` in the user's data
    dir (see `resolved_store_path`). Retention drops whole sessions: those older than
    `retention_max_age_s`, then, while the file holds more than `retention_max_bytes`,
    the oldest of the tenant storing the most bytes (see `store_retention`). `max_sessions` bounds
    the live sessions the tracer follows, all tenants together; for room it ends the
    least recently active of the tenant holding the most (see `sessions`), so one tenant's
    traffic never ends another's within its share. `record_prompt_blocks` stores each step's prompt as block
    fingerprints (hashes, no content; see `prompt_blocks`), which exports carry as
    `hash_ids`. `capture_content` None means the OpenTelemetry GenAI instrumentations'
    switch decides (`resolved_capture_content`). `queue_size` bounds the in-memory events between the request
    path and the writer thread; `otlp_max_queue_size` bounds the spans waiting for the
    OTLP exporter and `otlp_attribute_max_length` each exported attribute value (the
    captured conversation), so an exporter outage drops spans instead of growing memory.
    The `otlp_*` numbers None mean "not set in the file" (see `resolved_otlp_*`).
    """

    enabled: bool = True
    service_name: str = "stepahead"
    capture_content: bool | None = None
    record_prompt_blocks: bool = True
    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    otlp_max_queue_size: int | None = None
    otlp_export_timeout_s: float | None = None
    otlp_attribute_max_length: int | None = None
    store_enabled: bool = True
    store_path: str | None = None
    retention_max_age_s: float = 7 * 24 * 3600.0
    retention_max_bytes: int = 256 * 1024 * 1024
    retention_interval_s: float = 60.0
    session_idle_timeout_s: float = 900.0
    max_sessions: int = 100_000
    queue_size: int = 10_000

    def __post_init__(self) -> None:
        for name in ("otlp_max_queue_size", "otlp_attribute_max_length", "retention_max_bytes",
                     "max_sessions", "queue_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise TraceConfigError(f"tracing.{name} must be >= 1")
        for name in ("otlp_export_timeout_s", "retention_max_age_s", "retention_interval_s",
                     "session_idle_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise TraceConfigError(f"tracing.{name} must be > 0")
        if self.otlp_export_timeout_s is not None and self.otlp_export_timeout_s > MAX_OTLP_EXPORT_TIMEOUT_S:
            raise TraceConfigError(f"tracing.otlp_export_timeout_s must be at most {MAX_OTLP_EXPORT_TIMEOUT_S:g} "
                                   f"(a day), not {self.otlp_export_timeout_s!r}")
        if self.otlp_protocol is not None and self.otlp_protocol not in OTLP_PROTOCOLS:
            raise TraceConfigError(f"tracing.otlp_protocol must be one of {OTLP_PROTOCOLS}, "
                                   f"not {self.otlp_protocol!r}")

    def resolved_capture_content(self, environ: Mapping[str, str] = os.environ) -> bool:
        """Whether prompts and replies are kept: the config's `capture_content` when set,
        else $OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (`true`, or the newer
        `SPAN_ONLY` / `EVENT_ONLY` / `SPAN_AND_EVENT`; anything else, or unset, is off)."""
        if self.capture_content is not None:
            return self.capture_content
        return environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in CAPTURE_CONTENT_ON

    def resolved_otlp_protocol(self, environ: Mapping[str, str] = os.environ) -> str:
        """The OTLP protocol spans are sent with: the config's `otlp_protocol` when set,
        else $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else $OTEL_EXPORTER_OTLP_PROTOCOL, else
        http/protobuf. A variable's value outside `OTLP_PROTOCOLS` (`http/json`, which the
        OpenTelemetry Python SDK cannot send, or a typo) raises TraceConfigError naming it."""
        if self.otlp_protocol is not None:
            return self.otlp_protocol
        for name in OTLP_PROTOCOL_ENVS:
            value = environ.get(name, "").strip()
            if value:
                if value not in OTLP_PROTOCOLS:
                    raise TraceConfigError(f"{name} must be one of {OTLP_PROTOCOLS}, not {value!r}")
                return value
        return DEFAULT_OTLP_PROTOCOL

    def resolved_otlp_export_timeout_s(self, environ: Mapping[str, str] = os.environ) -> float:
        """Each OTLP export request's timeout in seconds: `otlp_export_timeout_s`, else
        $OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else $OTEL_EXPORTER_OTLP_TIMEOUT (seconds, as the
        OpenTelemetry Python SDK reads them), else 10; at most a day."""
        if self.otlp_export_timeout_s is not None:
            return self.otlp_export_timeout_s
        return env_number(environ, OTLP_TIMEOUT_ENVS, float, DEFAULT_OTLP_EXPORT_TIMEOUT_S,
                          most=MAX_OTLP_EXPORT_TIMEOUT_S)

    def resolved_otlp_max_queue_size(self, environ: Mapping[str, str] = os.environ) -> int:
        """How many spans wait for the exporter at most: `otlp_max_queue_size`, else
        $OTEL_BSP_MAX_QUEUE_SIZE, else 2048."""
        if self.otlp_max_queue_size is not None:
            return self.otlp_max_queue_size
        return env_number(environ, OTLP_QUEUE_SIZE_ENVS, int, DEFAULT_OTLP_MAX_QUEUE_SIZE)

    def resolved_otlp_max_export_batch_size(self, environ: Mapping[str, str] = os.environ) -> int:
        """How many spans one export takes at most: $OTEL_BSP_MAX_EXPORT_BATCH_SIZE, else
        512, and never more than the queue holds (the SDK refuses a larger one)."""
        wanted = env_number(environ, OTLP_BATCH_SIZE_ENVS, int, DEFAULT_OTLP_MAX_EXPORT_BATCH_SIZE)
        return min(wanted, self.resolved_otlp_max_queue_size(environ))

    def resolved_otlp_attribute_max_length(self, environ: Mapping[str, str] = os.environ) -> int:
        """The most characters an exported span attribute value keeps (longer ones are cut,
        so a captured conversation's JSON is then incomplete): `otlp_attribute_max_length`,
        else $OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, else $OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT,
        else 65536."""
        if self.otlp_attribute_max_length is not None:
            return self.otlp_attribute_max_length
        return env_number(environ, ATTRIBUTE_LENGTH_ENVS, int, DEFAULT_OTLP_ATTRIBUTE_MAX_LENGTH)

    def resolved_service_name(self, environ: Mapping[str, str] = os.environ) -> str:
        """The `service.name` of the spans, first found of: $OTEL_SERVICE_NAME, the
        `service.name` entry of $OTEL_RESOURCE_ATTRIBUTES, the config's `service_name`
        (by default "stepahead"). The variables are the OpenTelemetry SDK's, in its order;
        an empty value counts as unset."""
        named = environ.get(SERVICE_NAME_ENV, "").strip()
        return named or resource_attribute(environ.get(RESOURCE_ATTRIBUTES_ENV, ""),
                                           "service.name") or self.service_name

    def resolved_store_path(self, environ: Mapping[str, str] = os.environ) -> Path:
        """Where the SQLite store lives: config, then $STEPAHEAD_TRACE_DB, then the
        user's data dir (e.g. ~/.local/share/stepahead/traces.sqlite3)."""
        return data_file(self.store_path or environ.get(STORE_PATH_ENV), STORE_FILE_NAME)


def env_number(environ: Mapping[str, str], names: tuple[str, ...], kind: type, default,
               most: float = TOML_INT_MAX):
    """The value of the first of `names` set (non-empty) in `environ`, as `kind` (int or
    float), else `default`. A value that is not a positive number, or is past `most` (by
    default the 64-bit bound the file's integers have: the SDK's queue is a C size;
    `inf` too), raises TraceConfigError naming the variable, as a bad protocol variable does."""
    for name in names:
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            what = "a positive integer" if kind is int else "a positive number"
            raise TraceConfigError(f"{name} must be {what}, not {text!r}")
        if value > most:
            raise TraceConfigError(f"{name} must be at most {most}, not {text!r}")
        return value
    return default


def resource_attribute(attributes: str, key: str) -> str | None:
    """The value of `key` in an $OTEL_RESOURCE_ATTRIBUTES string (`k1=v1,k2=v2`, values
    percent-decoded, the last of a repeated key winning, as the OpenTelemetry SDK reads
    it); None when absent or empty. An entry without `=` is skipped."""
    found = None
    for item in attributes.split(","):
        name, equals, value = item.partition("=")
        if equals and name.strip() == key:
            found = unquote(value.strip())
    return found or None


def data_file(configured: str | None, file_name: str) -> Path:
    """`configured` (a path, `~` expanded) when given, else `file_name` in the user's
    data dir for stepahead."""
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_data_dir
    return Path(user_data_dir("stepahead", appauthor=False)) / file_name


_BOOLS = {"enabled", "capture_content", "record_prompt_blocks", "store_enabled"}
_INTS = {"otlp_max_queue_size", "otlp_attribute_max_length", "retention_max_bytes", "max_sessions", "queue_size"}
_FLOATS = {"otlp_export_timeout_s", "retention_max_age_s", "retention_interval_s",
           "session_idle_timeout_s"}
_STRINGS = {"service_name", "otlp_endpoint", "otlp_protocol", "store_path"}


def toml_int_problem(value: Any, where: str) -> str | None:
    """What is wrong with `value` when it is an integer past TOML's 64 bits (tomllib loads
    any size; a C size made of one overflows, as the OTLP queue did); None for anything
    else. The one check of every config table (`gateway.config_values.take` and
    `check_toml_ints`, `[tracing]` here), so each refuses them alike."""
    if isinstance(value, int) and not isinstance(value, bool) and not TOML_INT_MIN <= value <= TOML_INT_MAX:
        return f"{where} is past TOML's 64-bit integer range: {value}"
    return None


def unknown_key_problem(table: Mapping[str, Any], known: Collection[str], where: str,
                        what: str = "key") -> str | None:
    """What is wrong with the first key of `table` not in `known`, with the nearest known
    one when it looks like a typo (`num_worker` -> did you mean 'num_workers'?) and the
    known ones; None when every key is known. Shared by every config table's check, so a
    misspelt setting is never silently ignored."""
    for key in table:
        if key not in known:
            return f"{where}: unknown {what} {key!r}{did_you_mean(key, known)} (known: {', '.join(sorted(known))})"
    return None


def parse_trace_config(table: Mapping[str, Any]) -> TraceConfig:
    """A `TraceConfig` from the `[tracing]` TOML table; unknown keys are an error."""
    known = {f.name for f in fields(TraceConfig)}
    problem = unknown_key_problem(table, known, "tracing")
    if problem:
        raise TraceConfigError(problem)
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _BOOLS and not isinstance(value, bool):
            raise TraceConfigError(f"tracing.{key} must be true or false")
        if key in _INTS and (isinstance(value, bool) or not isinstance(value, int)):
            raise TraceConfigError(f"tracing.{key} must be an integer")
        problem = toml_int_problem(value, f"tracing.{key}")
        if problem:
            raise TraceConfigError(problem)
        if key in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TraceConfigError(f"tracing.{key} must be a number")
            if not math.isfinite(value):
                raise TraceConfigError(f"tracing.{key} must be a finite number, not {value!r}")
            value = float(value)
        if key in _STRINGS:
            if not isinstance(value, str):
                raise TraceConfigError(f"tracing.{key} must be a string")
            value = value or None
        values[key] = value
    if values.get("service_name") is None:
        values.pop("service_name", None)
    return TraceConfig(**values)
