"""Counting a chat prompt's tokens past the model's context, for POST
/v1/responses/input_tokens (FI154): a client counts to learn how much to trim, so the
prompt a create request refuses untokenized, its length alone past the context
(gateway/prompt_bounds.py, QA134 H0: "at least N tokens"), is counted too.

Invariants:
- the prompt is the one `LocalBackend.prepare_chat` renders for the same request (the
  same messages, the same tools shown: `chat_tools`), and its count is
  `len(MarkedTextEncoder.encode(prompt))`, the ids the create request would send;
- the work is bounded: a rendered prompt of more than `MAX_COUNTED_CHARS` characters is
  not tokenized (None: the caller keeps the "at least N" refusal). Tokenizing costs
  ~1-4 µs and ~200 bytes a character on the tiny model and SmolLM2 (8 MiB, the default
  body limit: 9-33 s and ~2 GB), so counting up to the body limit would hand each tenant
  half a minute of a core per request of its `requests_per_minute`;
- tokenizing runs in a worker thread through `tokenizer.encode`, which lets go of the
  GIL while it works (the Rust backend's `encode` holds it: the event loop would stall
  for the whole count); a prompt holding client special text (a MARK) goes through
  `MarkedTextEncoder`, as `shards.chat_template.render_chat` does, whose encodes let go
  of it too (`encode_releasing_gil`, FI157). NOTE: `MarkedTextEncoder.of` copies the
  backend for each such count (~0.2 s with the GIL held on SmolLM2).
"""
from __future__ import annotations

import asyncio

from gateway.schemas import ChatCompletionRequest
from shards.special_text import MARK, MarkedTextEncoder

MAX_COUNTED_CHARS = 1 << 20   # ~1-4 s of one core for a rendered prompt this long (measured, FI154)


def chat_tools(request: ChatCompletionRequest, supports_tools: bool) -> list[dict] | None:
    """The tool definitions the chat template renders for `request`: its tools when it
    may call them, and with `tool_choice` "none" too when the template can render them
    (the prompt, and so the cached prefix, "auto" has)."""
    if not request.tools or (request.tool_choice == "none" and not supports_tools):
        return None
    return [tool.model_dump(exclude_none=True) for tool in request.tools]


async def count_prompt_tokens(tokenizer, messages: list[dict], tools: list[dict] | None,
                              marked: MarkedTextEncoder | None = None) -> int | None:
    """The tokens of the chat prompt `messages` and `tools` render to, however far past
    the context; None when the rendered prompt is past `MAX_COUNTED_CHARS` (not tokenized).
    `marked`: the encoder of marked text to use (the prompt token cache's): one made here
    copies the tokenizer's backend, ~150 ms of the GIL on SmolLM2, for each such count."""
    from shards.chat_template import render_chat_prompt

    def render_and_count() -> int | None:
        prompt = render_chat_prompt(tokenizer, messages, tools)
        if len(prompt) > MAX_COUNTED_CHARS:
            return None
        if MARK not in prompt:   # NOTE: the usual case; `tokenizer.encode` releases the GIL
            return len(tokenizer.encode(prompt, add_special_tokens=False))
        return len((marked or MarkedTextEncoder.of(tokenizer)).encode(prompt))

    return await asyncio.to_thread(render_and_count)
