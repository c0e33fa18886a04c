"""Checking the JSON Schemas of clients' tools against their metaschema, remembered.

An agent sends the same tools with every step, and checking one schema against Draft
2020-12's metaschema costs about half a millisecond: with ten tools, more than everything
else the gateway does for a request. Invariants: `check` raises `SchemaError` exactly
when `validator_for(schema).check_schema(schema)` would, or would raise anything else (a
`pattern` with a repeat count past C's int raised OverflowError: a 500); only schemas
that passed are remembered, per tenant (one tenant's timing never tells whether another
sent a schema), by canonical JSON text, at most `capacity` of them, least recently used
dropped first.
"""
from __future__ import annotations

import json
from collections import OrderedDict

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from gateway.schema_limits import check_size

DEFAULT_CAPACITY = 2048


class SchemaChecker:
    __slots__ = ("capacity", "_passed")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._passed: OrderedDict[tuple[str, str], None] = OrderedDict()

    def check(self, tenant: str, schema: dict) -> None:
        """Raise `jsonschema.SchemaError` unless `schema` is a valid JSON Schema, and first
        `schema_limits.SchemaPastLimit` where it passes OpenAI's size limits (the metaschema
        check of a 10,000-property schema took 6 s on the event loop, QA134 H4)."""
        check_size(schema)
        key = (tenant, json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        if key in self._passed:
            self._passed.move_to_end(key)
            return
        try:
            validator_for(schema).check_schema(schema)
        except (OverflowError, RecursionError, ValueError) as exc:   # from compiling its patterns
            raise SchemaError(f"the schema cannot be checked: {exc}") from None
        self._passed[key] = None
        if len(self._passed) > self.capacity:
            self._passed.popitem(last=False)

    def __len__(self) -> int:
        return len(self._passed)
