"""A Responses request's tools, `tool_choice` and `text.format` in chat completions' shape
(responses_format.py turns the rest of the request).

Invariant: each returns what chat's request takes, or raises a 400 naming the Responses
parameter (`tools[i].type`, `tool_choice[.name]`, `text.format[.schema]`,
`text.verbosity`, `reasoning.effort`, `reasoning.summary`), never chat's.
"""
from __future__ import annotations

from typing import get_args

from gateway.errors import invalid_request
from gateway.schemas import Verbosity


def chat_tools(tools: list[dict]) -> list[dict]:
    """Chat's nested function tools for Responses' flat ones (a built-in tool is a 400)."""
    out = []
    for index, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise invalid_request(f"Tool type {tool.get('type')!r} is not supported: only function tools.",
                                  param=f"tools[{index}].type", code="unsupported_value")
        out.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters",
                                                                           "strict") if k in tool}})
    return out


def chat_tool_choice(choice: str | dict | None) -> str | dict | None:
    """Chat's `tool_choice` for a Responses one: a named function is `{"type": "function",
    "name": ...}` here, checked in that shape (a 400 naming `tool_choice.name`; chat's
    nested shape, which a client ported from chat completions sends, is told so). Another
    type (`allowed_tools`, a built-in tool's) is a 400 `unsupported_value` naming
    `tool_choice`, as such a tool is."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(kind, str) and kind != "function":
        raise invalid_request(f"A tool_choice of type {kind!r} is not supported: only function tools, chosen by "
                              '"auto", "none", "required" or {"type": "function", "name": "..."}.',
                              param="tool_choice", code="unsupported_value")
    if kind != "function":
        return choice
    name = choice.get("name")
    if name is None:
        nested = (' (chat completions\' {"type": "function", "function": {"name": ...}} is not this API\'s shape)'
                  if "function" in choice else "")
        raise invalid_request("Missing required parameter: 'tool_choice.name'. A named tool_choice is "
                              f'{{"type": "function", "name": "..."}}{nested}.', param="tool_choice.name",
                              code="missing_required_parameter")
    if not isinstance(name, str):
        raise invalid_request(f"Invalid type for 'tool_choice.name': expected a string, but got "
                              f"{type(name).__name__}.", param="tool_choice.name", code="invalid_type")
    return {"type": "function", "function": {"name": name}}


def chat_response_format(text: dict | None) -> dict | None:
    """Chat's `response_format` for a Responses `text` (its `format`; a json_schema one
    must carry its `schema` here, as at OpenAI)."""
    fmt = (text or {}).get("format")
    if fmt is not None and not isinstance(fmt, dict):
        raise invalid_request(f"Invalid type for 'text.format': expected an object, but got {type(fmt).__name__}.",
                              param="text.format", code="invalid_value")
    if not fmt or fmt.get("type") != "json_schema":
        return fmt
    if fmt.get("schema") is None:   # optional in chat's `response_format`, required here as at OpenAI
        raise invalid_request("Missing required parameter: 'text.format.schema'.", param="text.format.schema",
                              code="missing_required_parameter")
    schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}


VERBOSITIES = get_args(Verbosity)   # as chat's `verbosity`


def check_text_verbosity(text: dict | None) -> None:
    """`text.verbosity` checked as chat's `verbosity` is (accepted and ignored, as there):
    low, medium, high or null, else a 400 naming it."""
    verbosity = (text or {}).get("verbosity")
    if verbosity is not None and verbosity not in VERBOSITIES:
        raise invalid_request("Invalid request at 'text.verbosity': Input should be 'low', 'medium' or 'high'",
                              param="text.verbosity", code="invalid_value")


# OpenAI's values (the openai SDK's `ReasoningEffort` and `Reasoning.summary` /
# `generate_summary` literals): another is a 400, never echoed into a response the SDK's
# `Response` model would refuse
REASONING_VALUES = {"effort": ("none", "minimal", "low", "medium", "high", "xhigh", "max"),
                    "summary": ("auto", "concise", "detailed"), "generate_summary": ("auto", "concise", "detailed")}


def echoed_reasoning(reasoning: dict | None) -> dict:
    """`reasoning` as the response echoes it: the request's `effort` and `summary` (null
    when not sent), which are accepted and ignored; each (and the deprecated
    `generate_summary`, not echoed) is null or one of `REASONING_VALUES`, else a 400 naming
    it (`invalid_type` for no string, `invalid_value` for another string)."""
    echoed = {}
    for field, values in REASONING_VALUES.items():
        value = (reasoning or {}).get(field)
        if value is not None and not isinstance(value, str):
            raise invalid_request(f"Invalid type for 'reasoning.{field}': expected a string, but got "
                                  f"{type(value).__name__}.", param=f"reasoning.{field}", code="invalid_type")
        if value is not None and value not in values:
            raise invalid_request(f"Invalid value: {value!r}. Supported values are: "
                                  + ", ".join(repr(v) for v in values) + ".", param=f"reasoning.{field}",
                                  code="invalid_value")
        if field != "generate_summary":
            echoed[field] = value
    return echoed
