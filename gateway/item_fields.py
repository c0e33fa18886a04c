"""The fields OpenAI's item types declare, and the values they take: what a Responses
`input` item and a conversation item may carry (openai.types.responses' input and output
items, openai.types.conversations' items: what the official and Agents SDKs send back).

Invariant: an item checked here lists back valid against the SDK's item types; any other
field or value is a 400 naming where it is (`input[0].content[1].zzz`, `items[2].status`).
"""
from __future__ import annotations

from gateway.errors import invalid_request

# The fields OpenAI's item types declare, by item type, then by content part type;
# `check_item_fields` refuses any other. A field whose name is a Python keyword is also
# taken under the SDK's attribute name (`SDK_NAMES`; `async_`: the Python SDK's
# `model_dump()` of a function call, which the Agents SDK's conversation session sends
# back: QA112), checked as the field it names.
ITEM_FIELDS = {"message": ("type", "id", "role", "content", "status", "phase"),
               "function_call": ("type", "id", "call_id", "name", "arguments", "status", "caller", "namespace",
                                 "async", "created_by"),
               "function_call_output": ("type", "id", "call_id", "output", "status", "caller", "name",
                                        "namespace", "created_by"),
               "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status")}
PART_FIELDS = {"input_text": ("type", "text", "prompt_cache_breakpoint"), "text": ("type", "text"),
               "output_text": ("type", "text", "annotations", "logprobs"), "refusal": ("type", "refusal"),
               "input_image": ("type", "image_url", "detail", "file_id", "prompt_cache_breakpoint"),
               "summary_text": ("type", "text"), "reasoning_text": ("type", "text")}
REASONING_PARTS = {"summary": "summary_text", "content": "reasoning_text"}   # a reasoning item's part lists
SDK_NAMES = {"async_": "async"}   # the Python SDK's attribute name: the field's own (listed under it)
# the values a field takes (when not null), as OpenAI's types declare them: one of a few strings, or a JSON type
FIELD_VALUES = {"status": ("in_progress", "completed", "incomplete"), "phase": ("commentary", "final_answer")}
FIELD_TYPES = {"caller": (dict, "an object"), "namespace": (str, "a string"), "created_by": (str, "a string"),
               "async": (bool, "a boolean"), "encrypted_content": (str, "a string"), "annotations": (list, "an array"),
               "logprobs": (list, "an array"), "prompt_cache_breakpoint": (dict, "an object"),
               "name": (str, "a string"), "call_id": (str, "a string")}


def check_item_fields(item: dict, where: str) -> None:
    """A 400 naming `where.<field>` for a field OpenAI's type for the item (or one of its
    content parts) does not declare (`unknown_parameter`), or a value it does not take: a
    `status` or `phase` outside its values (`invalid_value`), a field of another JSON type
    (`invalid_type`), a reasoning item without its `summary` list of `summary_text` parts.
    Null is an absent field. Items and parts the chat reading refuses are left to it."""
    for sdk_name, name in SDK_NAMES.items():   # both given, and different: which is meant?
        if item.get(sdk_name) is not None and item.get(name) is not None and item[sdk_name] != item[name]:
            raise invalid_request(f"'{where}.{sdk_name}' and '{where}.{name}' name one field and differ: send "
                                  f"'{name}' alone.", param=f"{where}.{sdk_name}", code="invalid_value")
    kind = item.get("type", "message")
    _check_fields(item, ITEM_FIELDS.get(kind) if isinstance(kind, str) else None, where)
    if kind == "reasoning" and item.get("summary") is None:
        raise invalid_request(f"Missing required parameter: '{where}.summary'.", param=f"{where}.summary",
                              code="missing_required_parameter")
    for name in ("content", "output", "summary"):
        parts, part_kind = item.get(name), REASONING_PARTS.get(name) if kind == "reasoning" else None
        if part_kind is not None and not isinstance(parts, list | None):
            raise invalid_request(f"Invalid type for '{where}.{name}': expected an array, but got "
                                  f"{type(parts).__name__}.", param=f"{where}.{name}", code="invalid_type")
        for index, part in enumerate(parts if isinstance(parts, list) else ()):
            if part_kind is not None and not (isinstance(part, dict) and part.get("type") == part_kind
                                              and isinstance(part.get("text"), str)):
                raise invalid_request(f"'{where}.{name}[{index}]' must be a {part_kind} part: "
                                      f'{{"type": "{part_kind}", "text": "..."}}.', param=f"{where}.{name}[{index}]",
                                      code="invalid_value")
            if isinstance(part, dict) and isinstance(part.get("type"), str):
                _check_fields(part, PART_FIELDS.get(part["type"]), f"{where}.{name}[{index}]")


def _check_fields(record: dict, known: tuple[str, ...] | None, where: str) -> None:
    for key, value in record.items() if known is not None else ():   # None: a type the chat reading refuses
        name = SDK_NAMES.get(key, key)
        allowed, expected, param = FIELD_VALUES.get(name), FIELD_TYPES.get(name), f"{where}.{key}"
        if name not in known:
            raise invalid_request(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
        if value is not None and allowed is not None and not (isinstance(value, str) and value in allowed):
            raise invalid_request(f"Invalid value: {value!r}. Supported values are: "
                                  + ", ".join(repr(v) for v in allowed) + ".", param=param, code="invalid_value")
        if value is not None and expected is not None and not isinstance(value, expected[0]):
            raise invalid_request(f"Invalid type for '{param}': expected {expected[1]}, but got "
                                  f"{type(value).__name__}.", param=param, code="invalid_type")
