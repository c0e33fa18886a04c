"""Checking the JSON Schemas of clients' tools against their metaschema, remembered.

An agent sends the same tools with every step, and checking one schema against Draft
2020-12's metaschema costs about half a millisecond: with ten tools, more than everything
else the gateway does for a request. Invariants: `check` raises `SchemaError` exactly
when `validator_for(schema).check_schema(schema)` would, or would raise anything else (a
`pattern` with a repeat count past C's int raised OverflowError: a 500); only schemas
that passed are remembered, per tenant (one tenant's timing never tells whether another
sent a schema), by canonical JSON text, at most `capacity` of them, least recently used
dropped first. The remembered set is guarded by a lock, so `check` may run in a worker
thread while the event loop asks `unchecked` (the metaschema check itself runs outside it).

Off the event loop: the first check of a big schema is seconds of jsonschema (an `anyOf` of
4,999 objects, 598 KB: 1-10 s, QA139 H1), which on the loop stalled every tenant. Callers
run the check through `check_off_loop`: in a worker thread when some schema of the request
is not remembered as passed for the tenant (it still holds the GIL, but the loop gets its
switch-interval slices), inline otherwise (an agent's tools, the same every step, cost no
thread hop). `unchecked` computes the canonical JSON keys on the loop (~12 ms for 598 KB,
microseconds for usual tools): what the check raises, and in what order, is unchanged.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TypeVar

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from gateway.schema_limits import check_size
from gateway.schemas import ChatCompletionRequest

DEFAULT_CAPACITY = 2048

Result = TypeVar("Result")


def _canonical(schema: object) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class SchemaChecker:
    __slots__ = ("capacity", "_passed", "_lock", "_texts")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._passed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()   # held only to read or change `_passed` and `_texts`, never while checking
        # id(schema) -> (schema, its canonical JSON) that `unchecked` worked out, for `check` to
        # take instead of working it out again (~6 µs a usual tool schema, on every agent step)
        self._texts: dict[int, tuple[object, str]] = {}

    def unchecked(self, tenant: str, schemas: Iterable[object]) -> bool:
        """Whether `check` of some schema in `schemas` (None skipped) would run the metaschema
        check: it is not remembered as passed for `tenant` (or has no JSON text). Changes
        nothing remembered as passed; the canonical JSON it works out is kept for `check`
        until `forget`."""
        for schema in schemas:
            if schema is None:
                continue
            try:
                text = _canonical(schema)
            except (TypeError, ValueError, RecursionError):   # `check` raises what it raises, in the thread
                return True
            with self._lock:
                self._texts[id(schema)] = (schema, text)
                if (tenant, text) not in self._passed:
                    return True
        return False

    def forget(self, schemas: Iterable[object]) -> None:
        """Drop what `unchecked` kept of `schemas` (those `check` did not take)."""
        with self._lock:
            for schema in schemas:
                kept = self._texts.get(id(schema))
                if kept is not None and kept[0] is schema:
                    del self._texts[id(schema)]

    def _text(self, schema: object) -> str:
        """`schema`'s canonical JSON: the one `unchecked` kept for this very object, else worked out."""
        with self._lock:
            kept = self._texts.get(id(schema))
            if kept is not None and kept[0] is schema:
                del self._texts[id(schema)]
                return kept[1]
        return _canonical(schema)

    def check(self, tenant: str, schema: dict) -> None:
        """Raise `jsonschema.SchemaError` unless `schema` is a valid JSON Schema, and first
        `schema_limits.SchemaPastLimit` where it passes OpenAI's size limits (the metaschema
        check of a 10,000-property schema took 6 s on the event loop, QA134 H4); a schema
        remembered as passed is neither walked nor checked again."""
        key = (tenant, self._text(schema))
        with self._lock:
            if key in self._passed:   # (it passed `check_size` then, and the limits do not change)
                self._passed.move_to_end(key)
                return
        check_size(schema)
        try:
            validator_for(schema).check_schema(schema)
        except (OverflowError, RecursionError, ValueError) as exc:   # from compiling its patterns
            raise SchemaError(f"the schema cannot be checked: {exc}") from None
        with self._lock:
            self._passed[key] = None
            self._passed.move_to_end(key)   # another thread may have remembered it meanwhile
            while len(self._passed) > self.capacity:
                self._passed.popitem(last=False)

    def __len__(self) -> int:
        return len(self._passed)


async def check_off_loop(checker: SchemaChecker, tenant: str, schemas: Iterable[object],
                         check: Callable[..., Result], *args: object) -> Result:
    """`check(*args)`, which checks `schemas` with `checker` for `tenant` (and may raise):
    in a worker thread when one of them is `unchecked`, inline when all passed before."""
    schemas = list(schemas)
    try:
        if checker.unchecked(tenant, schemas):
            return await asyncio.to_thread(check, *args)
        return check(*args)
    finally:
        checker.forget(schemas)


def tool_parameters(request: ChatCompletionRequest) -> list[object]:
    """The parameter schemas of a chat request's tools (`chat_checks.check_tools` checks them)."""
    return [tool.function.parameters for tool in request.tools or ()]


def format_schema(request: ChatCompletionRequest) -> list[object]:
    """The schema of a chat request's `json_schema` response_format, if any (`reply_format.reply_schema`
    checks it)."""
    response_format = request.response_format
    if response_format is None or response_format.type != "json_schema" or response_format.json_schema is None:
        return []
    return [response_format.json_schema.schema_object()]
