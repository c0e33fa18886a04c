"""OpenAI response objects: chat completions, completions, their stream chunks.

Invariants: a response names the model id the client asked for; `usage` always carries
`prompt_tokens_details.cached_tokens`; a reply with tool calls has finish_reason
"tool_calls"; stream chunks of one response share `id`, `created` and `model`. With
`include_usage`, every chunk has `"usage": null` and one last chunk with empty `choices`
carries the usage, as OpenAI sends it.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field

from gateway.backend import ChatEvent, Finished, TextDelta, TokenChoice, ToolCallDelta, Usage


ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def new_id(prefix: str) -> str:
    """A unique response id. NOTE: ids need uniqueness, not secrecy: `random` (seeded from
    the OS once) is used because an `os.urandom` call costs ~40 µs on small VMs."""
    return f"{prefix}-{random.getrandbits(96):024x}"


def new_tool_call_id() -> str:
    return "call_" + "".join(random.choices(ID_ALPHABET, k=24))


def dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(slots=True)
class ToolCallAccumulator:
    id: str
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class Collected:
    """A whole non-streamed reply, built from the event stream."""

    text: str = ""
    tool_calls: dict[int, ToolCallAccumulator] = field(default_factory=dict)
    finished: Finished | None = None
    logprobs: list[TokenChoice] | None = None

    def add(self, event: ChatEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            if event.logprobs is not None:
                self.logprobs = (self.logprobs or []) + event.logprobs
        elif isinstance(event, ToolCallDelta):
            call = self.tool_calls.get(event.index)
            if call is None:
                call = self.tool_calls[event.index] = ToolCallAccumulator(
                    event.id or new_tool_call_id())
            call.name += event.name or ""
            call.arguments += event.arguments
        else:
            self.finished = event

    def finish_reason(self) -> str:
        if self.tool_calls:
            return "tool_calls"
        return self.finished.finish_reason if self.finished else "stop"


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """The fields every object and chunk of one response repeats."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


def _token(text: str, token_bytes: bytes, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(token_bytes)}


def chat_logprobs(choices: list[TokenChoice] | None) -> dict | None:
    """A chat choice's `logprobs`: per token its text, log probability, exact UTF-8 bytes
    and `top_logprobs`."""
    if choices is None:
        return None
    return {"content": [{**_token(c.token, c.token_bytes, c.logprob),
                         "top_logprobs": [_token(*alternative) for alternative in c.top]}
                        for c in choices], "refusal": None}


def completion_logprobs(choices: list[TokenChoice] | None, text_offset: int = 0) -> dict | None:
    """A completion choice's legacy `logprobs`: parallel lists of tokens, their log
    probabilities, the likeliest tokens as {text: log probability}, and each token's
    character offset in the completion (from `text_offset`)."""
    if choices is None:
        return None
    offsets = []
    for choice in choices:
        offsets.append(text_offset)
        text_offset += len(choice.token)
    return {"tokens": [c.token for c in choices], "token_logprobs": [c.logprob for c in choices],
            "top_logprobs": [{text: logprob for text, _, logprob in c.top} for c in choices],
            "text_offset": offsets}


def chat_completion(header: ResponseHeader, collected: Collected, usage: Usage) -> dict:
    message: dict = {"role": "assistant", "content": collected.text or None}
    if collected.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for _, call in sorted(collected.tool_calls.items())]
    return {"id": header.id, "object": "chat.completion", "created": header.created,
            "model": header.model,
            "choices": [{"index": 0, "message": message, "logprobs": chat_logprobs(collected.logprobs),
                         "finish_reason": collected.finish_reason()}],
            "usage": usage.to_openai()}


def text_completion(header: ResponseHeader, collected: Collected, usage: Usage) -> dict:
    return {"id": header.id, "object": "text_completion", "created": header.created,
            "model": header.model,
            "choices": [{"index": 0, "text": collected.text,
                         "logprobs": completion_logprobs(collected.logprobs),
                         "finish_reason": collected.finish_reason()}],
            "usage": usage.to_openai()}


class ChunkWriter:
    """Turns events into SSE `data:` lines for one chat or completion stream."""

    __slots__ = ("header", "is_chat", "include_usage", "has_tool_calls", "_seen_ids", "_text_offset")

    def __init__(self, header: ResponseHeader, *, is_chat: bool, include_usage: bool) -> None:
        self.header = header
        self.is_chat = is_chat
        self.include_usage = include_usage
        self.has_tool_calls = False
        self._seen_ids: dict[int, str] = {}
        self._text_offset = 0  # characters of completion text streamed so far

    def _chunk(self, choice: dict | None, usage: dict | None = None) -> bytes:
        chunk = {"id": self.header.id,
                 "object": "chat.completion.chunk" if self.is_chat else "text_completion",
                 "created": self.header.created, "model": self.header.model,
                 "choices": [choice] if choice is not None else []}
        if self.include_usage:
            chunk["usage"] = usage
        return b"data: " + dumps(chunk) + b"\n\n"

    def _choice(self, delta: dict, finish_reason: str | None = None,
                logprobs: list[TokenChoice] | None = None) -> dict:
        if self.is_chat:
            return {"index": 0, "delta": delta, "logprobs": chat_logprobs(logprobs),
                    "finish_reason": finish_reason}
        text = delta.get("content", "")
        choice = {"index": 0, "text": text, "logprobs": completion_logprobs(logprobs, self._text_offset),
                  "finish_reason": finish_reason}
        self._text_offset += len(text)
        return choice

    def opening(self) -> bytes:
        if not self.is_chat:
            return b""
        return self._chunk(self._choice({"role": "assistant", "content": ""}))

    def event(self, event: ChatEvent) -> bytes:
        if isinstance(event, TextDelta):
            return self._chunk(self._choice({"content": event.text}, logprobs=event.logprobs))
        if isinstance(event, ToolCallDelta):
            self.has_tool_calls = True
            call: dict = {"index": event.index}
            if event.index not in self._seen_ids:
                self._seen_ids[event.index] = event.id or new_tool_call_id()
                call["id"] = self._seen_ids[event.index]
                call["type"] = "function"
                call["function"] = {"name": event.name or "", "arguments": event.arguments}
            else:
                call["function"] = {"arguments": event.arguments}
            return self._chunk(self._choice({"tool_calls": [call]}))
        finish_reason = "tool_calls" if self.has_tool_calls else event.finish_reason
        closing = self._chunk(self._choice({}, finish_reason))
        if self.include_usage:
            closing += self._chunk(None, event.usage.to_openai())
        return closing

    @staticmethod
    def error(body: dict) -> bytes:
        return b"data: " + dumps(body) + b"\n\n"

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"
