"""OpenAI response objects: chat completions, completions, their stream chunks.

Invariants: a response names the model id the client asked for; `usage` always carries
`prompt_tokens_details.cached_tokens` (and a local model's chat usage
`completion_tokens_details`, `chat_usage`); a whole reply always has `system_fingerprint`
(null unless an upstream named one) and a chat completion's message `annotations: []`;
a reply with tool calls has finish_reason "tool_calls" unless it ran out of tokens
("length", as OpenAI sends it); a refusal is the
message's `refusal` (a stream's `delta.refusal`), which a chat completion's message always
has (null when the model did not refuse, as OpenAI's schema requires); an upstream's `system_fingerprint` and
`service_tier` are the reply's (in a stream, from the chunk that finishes a choice on,
as they are known only then; every chunk before has `system_fingerprint: null`, as a local
model's have all along); a chat stream's first delta of each choice is
`{"role": "assistant", "content": "", "refusal": null}` (content null for a forced tool
call), as OpenAI's is; stream chunks of
one response share `id`, `created` and `model`. With
`include_usage`, every chunk has `"usage": null` and one last chunk with empty `choices`
carries the usage, as OpenAI sends it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from gateway.backend import ChatEvent, Finished, RefusalDelta, TextDelta, TokenChoice, ToolCallDelta, Usage
from gateway.choices import merged_usage
from gateway.collected import Collected, Reply, reply_finish_reason
from gateway.ids import new_tool_call_id
from gateway.legacy_logprobs import StreamedLogprobs, completion_logprobs


# Line breaks to Python's `str.splitlines` (so to httpx's `iter_lines`) that JSON leaves raw
# inside strings; the others (\x0b, \x0c, \x1c-\x1e) it escapes already.
_RAW_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def line_breaks_escaped(json_text: str) -> str:
    """JSON text with the line breaks JSON keeps raw (inside strings) escaped, so it is
    one line to every line reader."""
    return json_text if json_text.isascii() else json_text.translate(_RAW_LINE_BREAKS)


def dumps(value: object) -> bytes:
    """Compact JSON, with the line breaks JSON keeps raw escaped: a model's U+2028 in a
    streamed delta split one `data:` line in two for line-splitting SSE readers."""
    return line_breaks_escaped(json.dumps(value, ensure_ascii=False, separators=(",", ":"))).encode()


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """The fields every object and chunk of one response repeats."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    service_tier: str | None = None   # a chat completion's, when the backend names it


def _token(text: str, token_bytes: bytes, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(token_bytes)}


def logprob_entries(choices: list[TokenChoice]) -> list[dict]:
    """Per token its text, log probability, exact UTF-8 bytes and `top_logprobs`: the
    entries of chat's `logprobs.content` and of a Responses `output_text`'s `logprobs`."""
    return [{**_token(c.token, c.token_bytes, c.logprob),
             "top_logprobs": [_token(*alternative) for alternative in c.top]} for c in choices]


def chat_logprobs(choices: list[TokenChoice] | None) -> dict | None:
    """A chat choice's `logprobs`."""
    if choices is None:
        return None
    return {"content": logprob_entries(choices), "refusal": None}


def chat_message(collected: Collected, *, null_refusal: bool = False) -> dict:
    """The reply's assistant message: `content` null only beside tool calls (OpenAI's
    convention), else its text, "" when empty, so the client can send it back as it is
    (an assistant message needs content or tool calls); `refusal` when the model refused,
    and with `null_refusal` `refusal: null` when it did not (a chat completion's message,
    whose schema at OpenAI requires the key)."""
    message: dict = {"role": "assistant", "content": collected.text or (None if collected.tool_calls else "")}
    if collected.refusal is not None or null_refusal:
        message["refusal"] = collected.refusal
    if collected.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for _, call in sorted(collected.tool_calls.items())]
    return message


# A local model's `completion_tokens_details`: it writes no reasoning apart from its text,
# makes no audio, and does not read `prediction` (so accepts and rejects none of it).
LOCAL_COMPLETION_DETAILS = {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                            "rejected_prediction_tokens": 0}


def chat_usage(usage: Usage, finished: Finished | None) -> dict:
    """A chat reply's `usage`: `completion_tokens_details` always there for a local model
    (`LOCAL_COMPLETION_DETAILS`, true of every local reply; an upstream's `Finished` names
    its worker "upstream"), an upstream's breakdown as it sent it (none when it sent none:
    the gateway cannot know it)."""
    fields = usage.to_openai()
    if "completion_tokens_details" not in fields and finished is not None and finished.worker != "upstream":
        fields["completion_tokens_details"] = dict(LOCAL_COMPLETION_DETAILS)
    return fields


def reply_fields(header: ResponseHeader, finished: Finished | None, *, is_chat: bool) -> dict:
    """A reply's `service_tier` (chat only: the one the gateway served it in, else the
    upstream's) and the upstream's `system_fingerprint`, those that are known."""
    fields = {}
    if finished is not None and finished.system_fingerprint is not None:
        fields["system_fingerprint"] = finished.system_fingerprint
    tier = header.service_tier if header.service_tier is not None else (
        finished.service_tier if finished is not None else None)
    if is_chat and tier is not None:
        fields["service_tier"] = tier
    return fields


def chat_completion(header: ResponseHeader, reply: Reply, usage: Usage) -> dict:
    return _whole_reply(header, reply, usage, is_chat=True)


def text_completion(header: ResponseHeader, reply: Reply, usage: Usage) -> dict:
    return _whole_reply(header, reply, usage, is_chat=False)


def _whole_reply(header: ResponseHeader, reply: Reply, usage: Usage, *, is_chat: bool) -> dict:
    """A whole chat completion (each choice's `message`, with `annotations: []`, and chat
    `logprobs`; `chat_usage`) or text completion (its `text`, legacy `logprobs`): the same
    frame, choices and usage. `system_fingerprint` is always there: the upstream's, else
    null (as vLLM sends it: a local model has no backend configuration id to name)."""
    choices = []
    for index, collected in enumerate(reply.choices):
        choice: dict = {"index": index}
        if is_chat:
            message = {**chat_message(collected, null_refusal=True), "annotations": []}   # none made here
            choice.update(message=message, logprobs=chat_logprobs(collected.logprobs))
        else:
            choice.update(text=collected.text,
                          logprobs=completion_logprobs(collected.logprobs, text_length=len(collected.text)))
        choice["finish_reason"] = collected.finish_reason()
        choices.append(choice)
    completion = {"id": header.id, "object": "chat.completion" if is_chat else "text_completion",
                  "created": header.created, "model": header.model, "choices": choices,
                  "usage": chat_usage(usage, reply.finished) if is_chat else usage.to_openai(),
                  "system_fingerprint": None}   # a local model's, as vLLM sends it
    completion.update(reply_fields(header, reply.finished, is_chat=is_chat))
    return completion


@dataclass(slots=True)
class _ChoiceStream:
    """What a stream remembers of one choice: its tool calls' ids, and its legacy
    logprobs' tokens and text sent (`text_offset`)."""

    seen_ids: dict[int, str] = field(default_factory=dict)
    logprobs: StreamedLogprobs = field(default_factory=StreamedLogprobs)


class ChunkWriter:
    """Turns events into SSE `data:` lines for one chat or completion stream of
    `num_choices` choices; the usage chunk follows the last choice's finish."""

    __slots__ = ("header", "is_chat", "include_usage", "is_call", "_choices", "_finishes", "_num_prompts",
                 "_text_frames")

    def __init__(self, header: ResponseHeader, *, is_chat: bool, include_usage: bool,
                 num_choices: int = 1, num_prompts: int = 1, is_call: bool = False) -> None:
        self.header = header
        self.is_call = is_call   # a forced call: the opening delta's content is null, as a whole reply's is
        self._num_prompts = num_prompts
        self.is_chat = is_chat
        self.include_usage = include_usage
        self._choices = [_ChoiceStream() for _ in range(num_choices)]
        self._finishes: list[Finished] = []
        self._text_frames: dict[int, tuple[bytes, bytes]] = {}   # choice -> a chat text chunk's bytes around its text

    def _chunk(self, choice: dict | None, usage: dict | None = None, finished: Finished | None = None) -> bytes:
        chunk = {"id": self.header.id,
                 "object": "chat.completion.chunk" if self.is_chat else "text_completion",
                 "created": self.header.created, "model": self.header.model,
                 "choices": [choice] if choice is not None else []}
        if self.header.service_tier is not None:
            chunk["service_tier"] = self.header.service_tier
        chunk["system_fingerprint"] = None   # a local model's, as a whole reply's; an upstream's once known
        if finished is not None:   # an upstream's, known once a choice finished
            chunk.update(reply_fields(self.header, finished, is_chat=self.is_chat))
        if self.include_usage:
            chunk["usage"] = usage
        return b"data: " + dumps(chunk) + b"\n\n"

    def _choice(self, index: int, delta: dict, finish_reason: str | None = None,
                logprobs: list[TokenChoice] | None = None) -> dict:
        if self.is_chat:
            return {"index": index, "delta": delta, "logprobs": chat_logprobs(logprobs),
                    "finish_reason": finish_reason}
        text = delta.get("content", "")
        return {"index": index, "text": text, "logprobs": self._choices[index].logprobs.chunk(text, logprobs),
                "finish_reason": finish_reason}

    def _text_chunk(self, index: int, text: str) -> bytes:
        """`_chunk` of a chat text delta without logprobs, byte for byte: the bytes around
        the text are encoded once per choice, then each chunk encodes only its text."""
        frame = self._text_frames.get(index)
        if frame is None:
            marker = "\x00text\x00"
            whole = self._chunk(self._choice(index, {"content": marker}))
            before, _, after = whole.partition(dumps(marker))
            frame = self._text_frames[index] = (before, after)
        return frame[0] + dumps(text) + frame[1]

    def opening(self) -> bytes:
        if not self.is_chat:
            return b""
        content = None if self.is_call else ""
        return b"".join(self._chunk(self._choice(index, {"role": "assistant", "content": content, "refusal": None}))
                        for index in range(len(self._choices)))

    def event(self, event: ChatEvent) -> bytes:
        index = event.choice
        if isinstance(event, TextDelta):
            if self.is_chat and event.logprobs is None:   # most chunks of a stream: only the text differs
                return self._text_chunk(index, event.text)
            return self._chunk(self._choice(index, {"content": event.text}, logprobs=event.logprobs))
        if isinstance(event, RefusalDelta):
            return self._chunk(self._choice(index, {"refusal": event.refusal})) if self.is_chat else b""
        seen_ids = self._choices[index].seen_ids
        if isinstance(event, ToolCallDelta):
            call: dict = {"index": event.index}
            if event.index not in seen_ids:
                seen_ids[event.index] = event.id or new_tool_call_id()
                call["id"] = seen_ids[event.index]
                call["type"] = "function"
                call["function"] = {"name": event.name or "", "arguments": event.arguments}
            elif event.name:   # the rest of a name an upstream split (`upstream_replies.name_piece`)
                call["function"] = {"name": event.name, "arguments": event.arguments}
            else:
                call["function"] = {"arguments": event.arguments}
            return self._chunk(self._choice(index, {"tool_calls": [call]}))
        finish_reason = reply_finish_reason(event.finish_reason, bool(seen_ids))
        closing = b""
        rest = None if self.is_chat else self._choices[index].logprobs.rest()
        if rest is not None:   # tokens whose text never came (a stop string's), at its end
            closing = self._chunk({"index": index, "text": "", "logprobs": rest, "finish_reason": None})
        closing += self._chunk(self._choice(index, {}, finish_reason), finished=event)
        self._finishes.append(event)
        if self.include_usage and len(self._finishes) == len(self._choices):
            merged = merged_usage(self._finishes, self._num_prompts)
            usage = chat_usage(merged.usage, merged) if self.is_chat else merged.usage.to_openai()
            closing += self._chunk(None, usage, finished=merged)
        return closing

    @staticmethod
    def error(body: dict) -> bytes:
        return b"data: " + dumps(body) + b"\n\n"

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"
