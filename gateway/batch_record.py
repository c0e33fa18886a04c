"""A batch of the Batch API as it stands (`Batch`), and its record in the batch index
(gateway/batch_store.py) as JSON: written by `record_text`, read back by `read_record`.

Invariants (QA196 F1: a record a newer version wrote, with a key this one lacks, failed the
start with a TypeError, and made the batch list a 500):
- a record is read tolerantly: a key this version does not know (a newer version's, after a
  rollback or from a newer gateway sharing the directory) is not an error; it is kept in
  `Batch.newer_keys` and written back with the record when this version rewrites it, so a
  newer version's field survives an older version's rewrite (its value as it was read);
- a record that is no JSON object, lacks a key without a default, or holds a value of
  another type than its field's (a bool is no int) is unreadable: `read_record` says why,
  never raises, and the store answers that batch as absent (never a 500, never a failed start).
"""
from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, dataclass, field, fields

UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
TIMES = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
         "cancelled_at")
NEWER_KEYS = "newer_keys"   # the field that holds them: never a key of the record


@dataclass(slots=True)
class Batch:
    """A batch as it stands; `as_object()` is OpenAI's batch object."""

    id: str
    tenant: str
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    times: dict[str, int] = field(default_factory=dict)   # TIMES reached so far
    model: str | None = None   # the model its requests name (the first request's)
    usage: dict | None = None   # its requests' token usage, summed once it ends
    output_expires_after_s: int | None = None   # its output and error files', from their making
    newer_keys: dict[str, object] = field(default_factory=dict, repr=False)   # its record's keys this version lacks

    def moved_to(self, status: str, now_s: float) -> None:
        self.status = status
        if f"{status}_at" in TIMES:   # every status but "validating" has its time
            self.times[f"{status}_at"] = int(now_s)

    def as_object(self) -> dict:
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint,
                "errors": None if self.errors is None else {"object": "list", "data": self.errors},
                "input_file_id": self.input_file_id, "completion_window": self.completion_window,
                "status": self.status, "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "created_at": self.created_at, "expires_at": self.expires_at,
                **{name: self.times.get(name) for name in TIMES},
                "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
                "metadata": self.metadata or None, "model": self.model, "usage": self.usage}


FIELD_TYPES = types.MappingProxyType(typing.get_type_hints(Batch))   # each field's type, read-only


def record_text(batch: Batch) -> str:
    """`batch`'s record: its fields, and the keys of the record it was read from that this
    version does not know, as they were (a field of its own wins over a key of the same name)."""
    known = {item.name: getattr(batch, item.name) for item in fields(Batch) if item.name != NEWER_KEYS}
    return json.dumps({**batch.newer_keys, **known}, ensure_ascii=False)


def read_record(text: object) -> Batch | str:
    """The batch `text` records, or why it is unreadable (the module docstring)."""
    try:
        record = json.loads(text)
    except (TypeError, ValueError, RecursionError):   # (not text; not JSON; nested past Python's stack)
        return "it is not JSON"
    if not isinstance(record, dict):
        return "it is not a JSON object"
    known, hints = {}, FIELD_TYPES
    for item in fields(Batch):
        if item.name == NEWER_KEYS:
            continue
        if item.name not in record:
            if item.default is MISSING and item.default_factory is MISSING:
                return f"it lacks {item.name!r}"
            continue
        if not _fits(record[item.name], hints[item.name]):
            return f"its {item.name!r} is not {_type_name(hints[item.name])}"
        known[item.name] = record[item.name]
    return Batch(**known, newer_keys={key: value for key, value in record.items() if key not in hints})


def _fits(value: object, hint: object) -> bool:
    """Whether `value` (as JSON reads it) is of the type `hint` (a field's annotation) names."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is int:
        return type(value) is int   # (JSON's true is no count)
    if hint is str:
        return isinstance(value, str)
    if hint is object:
        return True
    if (origin or hint) is dict:
        return isinstance(value, dict) and (not args or all(
            _fits(key, args[0]) and _fits(item, args[1]) for key, item in value.items()))
    if (origin or hint) is list:
        return isinstance(value, list) and (not args or all(_fits(item, args[0]) for item in value))
    raise TypeError(f"no check for a field of type {hint!r}")   # a field added with a new kind of type


def _type_name(hint: object) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "").replace("NoneType", "None")
