"""Forced tool calls and JSON replies for local models: `tool_choice` = "required" or a
named function, and `response_format` json_object / json_schema.

Our local workers take token ids and sampling settings, not grammars, so we cannot mask
logits. Instead the gateway writes the structure and lets the model write only the
values, each generation continuing the previous text (so each one is a prefix-cache hit):

(A JSON reply is step 2 and 3 with an empty head.)

1. the call opening is forced into the prompt: `<tool_call>\\n{"name": "` — for
   "required" the model then writes the name (stop at `"`) and we take the tool it names
   (exact, else the longest shared prefix, else the first tool); a named choice forces the
   whole `{"name": "NAME", "arguments": ` head;
2. the model writes the arguments freely (with part of the token budget; a JSON reply's
   opening `{` is forced); if they parse as a JSON object that validates
   against the tool's schema, that is the answer (the one-generation fast path a capable
   model takes);
3. otherwise the arguments are built by walking the schema: the gateway emits keys,
   quotes, braces and commas and asks the model for each leaf value with a stop string
   that ends it (`"` for strings; a short budget for numbers and booleans, read leniently;
   enums matched by prefix; array items one by one while the model goes on with a `,`).
   Values the model cannot produce fall back to the schema's
   `default`/`const`/first enum member/a zero value.

Invariant: the returned arguments are always a JSON object; they validate against the
schema whenever the schema uses only types, enums, required properties, nesting and
arrays with their item counts (no string patterns or lengths, which leaf filling does
not steer).
"""
from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from jsonschema import ValidationError
from jsonschema.validators import validator_for

# Continue the prompt text `suffix` (appended after the rendered prompt) and return the
# generated text; the callback owns sampling, usage accounting and cancellation.
Generate = Callable[[str, int, tuple[str, ...]], Awaitable[str]]

CALL_OPEN = '<tool_call>\n{"name": "'
NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
MAX_STRING_TOKENS = 48
MAX_DEPTH = 4
MAX_ARRAY_ITEMS = 8  # items a filled array gets at most (fewer when the model closes it)


def call_head(name: str) -> str:
    return f'{CALL_OPEN}{name}", "arguments": '


def choose_tool_name(generated: str, names: list[str]) -> str:
    """The tool the model named: exact match, else longest shared prefix, else the first."""
    text = generated.strip().strip('"')
    if text in names:
        return text

    def shared(name: str) -> int:
        size = 0
        while size < min(len(name), len(text)) and name[size] == text[size]:
            size += 1
        return size

    best = max(names, key=shared)
    return best if shared(best) > 0 else names[0]


def leading_json_object(text: str) -> dict | None:
    """The JSON object at the start of `text` (trailing text ignored), or None."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def is_valid(value: Any, schema: dict) -> bool:
    try:
        validator_for(schema)(schema).validate(value)
    except ValidationError:
        return False
    return True


def zero_value(schema: dict) -> Any:
    """A schema-valid placeholder: default, const, first enum member, or the type's zero."""
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = _kind(schema)
    return {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [],
            "object": {}, "null": None}.get(kind, None)


def _kind(schema: dict) -> str:
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return kind


async def fill_value(schema: dict, generate: Generate, prefix: str, depth: int) -> Any:
    """A value for `schema`, generated as the continuation of `prefix` (JSON so far)."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        options = [json.dumps(option) for option in schema["enum"]]
        text = await generate(prefix, 16, (",", "}", "\n"))
        matches = [o for o in options if o.startswith(text.strip()[:len(o)]) and text.strip()]
        return json.loads(matches[0]) if matches else schema["enum"][0]
    kind = _kind(schema)
    if kind == "object" and depth < MAX_DEPTH:
        return await fill_object(schema, generate, prefix, depth + 1)
    if kind == "array" and depth < MAX_DEPTH:
        return await fill_array(schema, generate, prefix, depth + 1)
    if kind == "string":
        text = await generate(prefix + '"', MAX_STRING_TOKENS, ('"',))
        return text
    if kind in ("integer", "number"):
        match = NUMBER.match(await generate(prefix, 8, (",", "}", "\n")))
        if match is None:
            return zero_value(schema)
        number = float(match.group(1))
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        text = (await generate(prefix, 2, (",", "}"))).strip().lower()
        return True if text.startswith("t") else False if text.startswith("f") \
            else zero_value(schema)
    return zero_value(schema)


async def fill_array(schema: dict, generate: Generate, prefix: str, depth: int) -> list:
    """Items filled one by one after `[`: `minItems` of them always, then another while
    the model continues the list (its next text starts a value after `[`, or a `,`
    after an item) and `maxItems` (at most MAX_ARRAY_ITEMS) allows."""
    items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
    least = max(0, int(schema.get("minItems", 0)))
    most = max(least, min(int(schema.get("maxItems", MAX_ARRAY_ITEMS)), MAX_ARRAY_ITEMS))
    values: list = []
    text = prefix + "["
    while len(values) < most:
        if len(values) >= least:
            after = (await generate(text, 2, ("]",))).lstrip()
            if not after or (values and not after.startswith(",")):
                break
        item_prefix = text + (", " if values else "")
        value = await fill_value(items, generate, item_prefix, depth)
        values.append(value)
        text = item_prefix + json.dumps(value, ensure_ascii=False)
    return values


async def fill_object(schema: dict, generate: Generate, prefix: str, depth: int = 0) -> dict:
    """Required properties (all of them when none are marked) filled leaf by leaf."""
    properties: dict = schema.get("properties", {})
    names = schema.get("required") or list(properties)
    result: dict = {}
    text = prefix + "{"
    for name in names:
        key_prefix = text + ("" if not result else ", ") + json.dumps(name) + ": "
        value = await fill_value(properties.get(name, {}), generate, key_prefix, depth)
        result[name] = value
        text = key_prefix + json.dumps(value, ensure_ascii=False)
    return result


def free_budget(max_tokens: int) -> int:
    """Tokens for the model's free try at a JSON object: what is left once up to 256 (at
    most half) are kept for leaf filling, should the free try fail."""
    return max(1, max_tokens - min(max_tokens // 2, 256))


def json_object_in(text: str) -> dict | None:
    """The first JSON object in `text` that parses from one of its first few "{"s (so
    prose or a code fence before it is skipped), or None."""
    start = text.find("{")
    for _ in range(8):
        if start < 0:
            return None
        found = leading_json_object(text[start:])
        if found is not None:
            return found
        start = text.find("{", start + 1)
    return None


async def forced_object(schema: dict | None, generate: Generate, head: str, max_tokens: int,
                        stop: tuple[str, ...] = (), opener: str = "") -> str:
    """A JSON object for `schema` written after `head`: the model's free try (after
    `opener`, forced too), kept when it parses and validates, else built leaf by leaf."""
    schema = schema or {"type": "object", "properties": {}}
    free = await generate(head + opener, free_budget(max_tokens), stop)
    parsed = leading_json_object(opener + free)
    if parsed is not None and is_valid(parsed, schema):
        return json.dumps(parsed, ensure_ascii=False)
    return json.dumps(await fill_object(schema, generate, head), ensure_ascii=False)


async def forced_arguments(schema: dict | None, generate: Generate, head: str,
                           max_tokens: int) -> str:
    """Arguments JSON for a call whose head (`call_head(name)`) is already forced."""
    return await forced_object(schema, generate, head, max_tokens, ("</tool_call>",))


async def forced_json(schema: dict, generate: Generate, max_tokens: int) -> str:
    """The whole reply as a JSON object for `schema` (`response_format`); its opening
    brace is forced, or a small model starts with prose or a code fence."""
    return await forced_object(schema, generate, "", max_tokens, opener="{")
