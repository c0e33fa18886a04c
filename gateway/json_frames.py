"""The parse state of a JSON reply read against its schema (`json_prefix.JsonPrefix`): one
frame per open object, array, string or scalar, innermost last. The filler
(`json_filling`) completes a document from the same frames.

Invariant: a frame holds only what its value needs to be checked or completed (a key
being read, the count of array items, a held string's text, a scalar's text so far).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class ObjectFrame:
    """Phases: first (after `{`), key (after `,`), in_key, colon, value (after `:`),
    next (after a member)."""

    schema: dict
    seen: list[str] = field(default_factory=list)
    phase: str = "first"
    key: str = ""


@dataclass(slots=True)
class ArrayFrame:
    """Phases: first (after `[`), value (after `,`), next (after an item)."""

    schema: dict
    count: int = 0
    phase: str = "first"


@dataclass(slots=True)
class StringFrame:
    """A string value (its content is kept only when held: the filler only continues it)."""

    schema: dict
    escape: str | None = None   # "\\" just after a backslash, "u…" inside a \u escape
    length: int = 0   # characters of content so far (an escape counts as one)
    check: Callable[[str], bool] | None = None   # for a string held till whole: its format and pattern
    held: str = ""   # the content as written, kept while `check` is set


@dataclass(slots=True)
class ScalarFrame:
    """A number, a literal, or an enum/const value: held until whole."""

    schema: dict
    text: str
    options: tuple[str, ...] = ()   # the serialized enum/const values, when it is one


Frame = ObjectFrame | ArrayFrame | StringFrame | ScalarFrame
