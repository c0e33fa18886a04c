"""A JSON reply checked against its schema while the model writes it: how much is final.

`JsonPrefix(schema)` reads text as it streams (`feed`) and keeps the parse state as a
stack of frames. After each character it knows whether the text so far can still become
a document valid against the schema; the first character that cannot (a key the schema
does not have, a `}` before a required key, a string where a number belongs, a raw
newline inside a string, a number out of its bounds, a string past its `maxLength`, or
closed short of its `minLength` or not of its format or pattern, an object or array
opened MAX_NESTING deep: a recursive schema's free try ends there) ends the reading:
`has_deviated`, and later text is ignored.

Keys a schema does not name are taken only where it names none, or allows them with
`additionalProperties: true` (`json_schemas.is_closed`).

`num_committed` is the length of the longest prefix the leaf filler (`json_filling`) can
complete from: between an object's members, after a key's colon, between an array's
items, inside a plain string value. Text up to there is final and may be sent to a
streaming client; a partial key, number, literal, enum value or string held to a format
or a pattern (`json_formats`: a date, a UUID, …) is held back until it is whole.

Only schemas `schema_keywords.is_steerable` accepts are read this way; others are validated
whole (`tool_forcing`).

Invariant: for a steerable schema, a committed prefix is the prefix of at least one valid
document, and reading it again gives a state the filler completes into one.
"""
from __future__ import annotations

import json
import re

from gateway.json_bounds import number_text_fits, string_lengths
from gateway.json_frames import ArrayFrame, Frame, ObjectFrame, ScalarFrame, StringFrame
from gateway.json_formats import whole_string_check
from gateway.json_schemas import SchemaRoot, is_closed, is_integer_only, kinds_of

WHITESPACE = " \t\n\r"
NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][-+]?[0-9]*)?")
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
LITERALS = {"t": ("true", "boolean"), "f": ("false", "boolean"), "n": ("null", "null")}
MAX_NESTING = 32   # objects and arrays the model may have open; opening one more strays


class JsonPrefix:
    def __init__(self, schema: dict, root: SchemaRoot | None = None) -> None:
        self.root = root or SchemaRoot(schema)
        self.schema = self.root.resolve(schema)
        self.frames: list[Frame] = []
        self._chars: list[str] = []   # the text read, one string per character
        self.num_committed = 0
        self.is_complete = False
        self.has_deviated = False

    @property
    def text(self) -> str:
        return "".join(self._chars)

    def committed(self, start: int = 0) -> str:
        """The committed text from `start` on."""
        return "".join(self._chars[start:self.num_committed])

    @property
    def is_settled(self) -> bool:
        return self.is_complete or self.has_deviated

    def feed(self, text: str) -> JsonPrefix:
        for char in text:
            if self.is_settled:
                break
            if not self.frames and not self._chars and char in WHITESPACE:
                continue   # leading whitespace is not part of the reply
            if not self._step(char):
                self.has_deviated = True
                break
            self._chars.append(char)
            if self.is_complete or self._is_resumable():
                self.num_committed = len(self._chars)
        return self

    def _is_resumable(self) -> bool:
        if not self.frames:
            return not self._chars
        top = self.frames[-1]
        if isinstance(top, (ObjectFrame, ArrayFrame)):
            return top.phase in ("first", "value", "next")
        return isinstance(top, StringFrame) and top.escape is None and top.check is None

    def _step(self, char: str) -> bool:
        if not self.frames:
            return self._start_value(self.schema, char)
        top = self.frames[-1]
        if isinstance(top, StringFrame):
            return self._string_char(top, char)
        if isinstance(top, ScalarFrame):
            return self._scalar_char(top, char)
        if isinstance(top, ObjectFrame):
            return self._object_char(top, char)
        return self._array_char(top, char)

    def _value_done(self) -> None:
        """The top frame's value is whole: pop it and tell its parent."""
        self.frames.pop()
        if not self.frames:
            self.is_complete = True
            return
        parent = self.frames[-1]
        if isinstance(parent, ObjectFrame):
            parent.seen.append(parent.key)
        else:
            parent.count += 1
        parent.phase = "next"

    def _start_value(self, schema: dict, char: str) -> bool:
        if char in WHITESPACE:
            return True
        schema = self.root.branch(schema, char)
        if schema is None:
            return False
        options = self.root.options(schema)
        if options is not None:
            if not any(option.startswith(char) for option in options):
                return False
            self.frames.append(ScalarFrame(schema, char, options))
            return self._scalar_settles()
        kinds = kinds_of(schema)
        if char in "{[" and len(self.frames) >= MAX_NESTING:   # the filler closes it (`json_smallest.SmallestValues.minimal`)
            return False
        if char == "{" and "object" in kinds:
            self.frames.append(ObjectFrame(schema))
        elif char == "[" and "array" in kinds:
            self.frames.append(ArrayFrame(schema))
        elif char == '"' and "string" in kinds:
            self.frames.append(StringFrame(schema, check=whole_string_check(schema)))
        elif (char == "-" or char.isdigit()) and kinds & {"number", "integer"}:
            self.frames.append(ScalarFrame(schema, char))
        elif char in LITERALS and LITERALS[char][1] in kinds:
            self.frames.append(ScalarFrame(schema, char))
            return self._scalar_settles()
        else:
            return False
        return True

    def _object_char(self, frame: ObjectFrame, char: str) -> bool:
        schema = frame.schema
        properties: dict = schema.get("properties", {})
        closed = is_closed(schema)
        if frame.phase == "in_key":
            if char == '"':
                if frame.key in frame.seen or (closed and frame.key not in properties):
                    return False
                frame.phase = "colon"
                return True
            if char == "\\" or ord(char) < 0x20:
                return False
            frame.key += char
            return not closed or any(name.startswith(frame.key) and name not in frame.seen
                                     for name in properties)
        if char in WHITESPACE and frame.phase != "value":
            return True
        if frame.phase in ("first", "key") and char == '"':
            frame.phase, frame.key = "in_key", ""
            return not closed or any(name not in frame.seen for name in properties)
        if frame.phase in ("first", "next") and char == "}":
            if any(name not in frame.seen for name in schema.get("required", ())):
                return False
            self._value_done()
            return True
        if frame.phase == "next" and char == ",":
            frame.phase = "key"
            return not closed or any(name not in frame.seen for name in properties)
        if frame.phase == "colon" and char == ":":
            frame.phase = "value"
            return True
        if frame.phase == "value":
            return self._start_value(self.root.member_schema(schema, frame.key), char)
        return False

    def _array_char(self, frame: ArrayFrame, char: str) -> bool:
        schema = frame.schema
        if frame.phase in ("first", "value") and char not in WHITESPACE:
            if frame.phase == "first" and char == "]":
                return self._close_array(frame)
            if frame.count >= self.root.max_items(schema):
                return False
            frame.phase = "value"
            return self._start_value(self.root.item_schema(schema), char)
        if char in WHITESPACE:
            return True
        if frame.phase == "next" and char == ",":
            frame.phase = "value"
            return frame.count < self.root.max_items(schema)
        if frame.phase == "next" and char == "]":
            return self._close_array(frame)
        return False

    def _close_array(self, frame: ArrayFrame) -> bool:
        if frame.count < int(frame.schema.get("minItems", 0)):
            return False
        self._value_done()
        return True

    def _string_char(self, frame: StringFrame, char: str) -> bool:
        """A string's content is read against its `minLength`/`maxLength` (`json_bounds`),
        and a held one against its format and pattern at its end (`json_formats`)."""
        shortest, longest = string_lengths(frame.schema)
        if frame.escape is None and char == '"':
            whole = frame.check is None or frame.check(json.loads(f'"{frame.held}"'))
            if frame.length < shortest or not whole:
                return False
            self._value_done()
            return True
        if frame.check is not None:
            frame.held += char
        if frame.escape is None:
            if char == "\\":
                frame.escape = "\\"
                return longest is None or frame.length < longest
            if ord(char) < 0x20:
                return False
            frame.length += 1
            return longest is None or frame.length <= longest
        if frame.escape == "\\":
            if char == "u":
                frame.escape = "u"
                return True
            if char not in '"\\/bfnrt':
                return False
            frame.escape, frame.length = None, frame.length + 1
            return True
        if char not in "0123456789abcdefABCDEF":
            return False
        frame.escape += char
        if len(frame.escape) == 5:
            frame.escape, frame.length = None, frame.length + 1
        return True

    def _scalar_char(self, frame: ScalarFrame, char: str) -> bool:
        if frame.options:
            if any(option.startswith(frame.text + char) for option in frame.options):
                frame.text += char
                return self._scalar_settles()
            if frame.text not in frame.options:
                return False
        elif frame.text[0] in LITERALS:   # literals settle when whole
            frame.text += char
            return LITERALS[frame.text[0]][0].startswith(frame.text) and self._scalar_settles()
        elif NUMBER_PREFIX.fullmatch(frame.text + char) and not (char in ".eE" and is_integer_only(frame.schema)):
            frame.text += char
            return True
        elif NUMBER.fullmatch(frame.text) is None or not number_text_fits(frame.text, frame.schema):
            return False
        self._value_done()   # the number or option ended at `char`: the parent reads it
        if self._is_resumable():
            self.num_committed = len(self._chars)   # the value is whole before `char`
        return self._step(char)

    def _scalar_settles(self) -> bool:
        """A literal, or an option no other option extends, is whole at its last char."""
        frame = self.frames[-1]
        assert isinstance(frame, ScalarFrame)
        if frame.options:
            if frame.text in frame.options and not any(
                    o != frame.text and o.startswith(frame.text) for o in frame.options):
                self._value_done()
        elif frame.text == LITERALS[frame.text[0]][0]:
            self._value_done()
        return True
