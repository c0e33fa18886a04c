"""The `metadata` a request may attach (chat completions, legacy completions, responses,
conversations, batches), with OpenAI's limits.

Invariant: metadata kept is at most 16 string pairs, keys up to 64 characters, values up
to 512; anything else is a 400 naming `metadata` (or the offending key) before anything
is kept or run.
"""
from __future__ import annotations

from typing import Any

from gateway.errors import invalid_request

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


def checked_metadata(raw: Any, param: str = "metadata") -> dict[str, str]:
    """`raw` as metadata; None is none."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid_request(f"'{param}' must be an object of string keys and string values.", param=param)
    if len(raw) > MAX_METADATA_PAIRS:
        raise invalid_request(f"'{param}' holds {len(raw)} pairs; at most {MAX_METADATA_PAIRS} are kept.",
                              param=param, code="invalid_value")
    for key, value in raw.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise invalid_request(f"A '{param}' key is {len(key)} characters long; at most "
                                  f"{MAX_METADATA_KEY_CHARS}.", param=param, code="invalid_value")
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise invalid_request(f"'{param}.{key}' must be a string of at most {MAX_METADATA_VALUE_CHARS} "
                                  "characters.", param=f"{param}.{key}", code="invalid_value")
    return dict(raw)
