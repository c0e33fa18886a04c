"""Seeded random mutations of valid request bodies, for the never-a-500 property test.

Each mutation replaces, deletes or adds a field anywhere in a body (values chosen to hit
edge cases: wrong types, huge numbers, empty and long strings, nested containers) and may
turn streaming on. Deterministic for a seed.
"""
from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

TOOL = {"type": "function", "function": {"name": "get_w", "description": "d", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
VALID_BODIES: dict[str, dict] = {
    "/v1/chat/completions": {
        "model": "tiny", "max_tokens": 4, "tools": [TOOL], "tool_choice": "auto", "temperature": 0.5,
        "top_p": 0.9, "n": 2, "stop": ["x"], "seed": 3, "response_format": {"type": "text"},
        "logit_bias": {"5": 1}, "presence_penalty": 0.1, "user": "u", "metadata": {"a": "b"},
        "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_w", "arguments": "{\"city\": \"x\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]},
    "/v1/completions": {
        "model": "tiny", "prompt": ["hello", "world"], "max_tokens": 4, "n": 2, "best_of": 2, "echo": True,
        "logprobs": 2, "stop": "z", "seed": 1, "temperature": 1.0, "logit_bias": {"7": -100}, "user": "u"},
    "/v1/responses": {
        "model": "tiny", "instructions": "be brief", "tool_choice": "auto", "max_output_tokens": 16,
        "tools": [{"type": "function", "name": "get_w", "parameters": {"type": "object", "properties": {}}}],
        "text": {"format": {"type": "text"}}, "truncation": "auto", "metadata": {"k": "v"},
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"}]},
}
EMBEDDINGS_BODY = {"model": "fake", "input": ["first", "second"], "encoding_format": "float", "user": "u"}
ODD_VALUES: tuple[Any, ...] = (
    None, -1, 0, 1, 2**70, -2**70, 1e308, 0.5, "", "x" * 3000, [], {}, [[]], [None], {"a": None},
    True, False, "NaN", [1] * 500, {"type": "bogus"}, [{"type": "bogus"}], "tiny", 10**6, [{}], {"": ""},
    "a\ud800b", "\udc00", json.loads("[" * 70 + "]" * 70))


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _paths(child, path + (key,))


def mutate(body: dict, rng: random.Random) -> dict:
    out = copy.deepcopy(body)
    for _ in range(rng.choice((1, 1, 1, 2))):
        paths = [p for p in _paths(out) if p]
        path = rng.choice(paths)
        parent = out
        for key in path[:-1]:
            parent = parent[key]
        roll = rng.random()
        if roll < 0.3:
            del parent[path[-1]]
        elif roll < 0.9:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
        else:
            out["unknown_field"] = copy.deepcopy(rng.choice(ODD_VALUES))
    if rng.random() < 0.4:
        out["stream"] = True
        if "messages" in out and rng.random() < 0.5:
            out["stream_options"] = {"include_usage": True}
    return out
