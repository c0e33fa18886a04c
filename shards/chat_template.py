"""Turning OpenAI chat messages into prompt token ids with the model's chat template.

Invariant that the prefix cache relies on: rendering the messages of agent step k+1
(= step k's messages + the assistant reply + tool results) yields a token sequence whose
head equals step k's rendering, so step k+1 finds step k's blocks in the cache.

Models whose own template cannot render `tools` but speak ChatML (`<|im_start|>`, like
the embedded SmolLM2) get stepahead's ChatML tool template, which uses the Hermes/Qwen
`<tool_call>{json}</tool_call>` convention, for a request with `tools` and for one whose
messages hold tool calls or results (without it the model's own template would drop
them). Rendering tool turns without `tools`, it writes the system turn the model's own
template writes before a first message that is not a system one (SmolLM2's default
"You are a helpful AI assistant named SmolLM, ..."; `default_system_turn`), as that
template does for the same messages: the persona is kept, and the step extends the
earlier steps' prompts (QA162 L3). With `tools` the tools' system turn stands instead, as
before. Other templates without tools: no tool support (the gateway answers 400).
"""
from __future__ import annotations

import json
from typing import Any

from shards.special_text import MARK, MarkedTextEncoder, SpecialText

CHATML_TOOLS_TEMPLATE = (
    # NOTE: transformers renders templates with trim_blocks, so every newline is emitted
    # inside a string expression, never right after a block tag.
    r"{% if tools %}"
    r"{{ '<|im_start|>system\n' }}"
    r"{% if messages and messages[0].role == 'system' %}{{ messages[0].content + '\n\n' }}{% endif %}"
    r"{{ '# Tools\n\nYou may call one or more functions to help with the request. ' }}"
    r"{{ 'The functions are listed as JSON signatures inside <tools></tools>:\n<tools>' }}"
    r"{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}"
    r"{{ '\n</tools>\n\nTo call a function, answer with one JSON object per call inside tags:\n' }}"
    r"""{{ '<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n' }}"""
    r"{{ '</tool_call><|im_end|>\n' }}"
    r"{% elif messages and messages[0].role == 'system' %}"
    r"{{ '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}"
    r"{% elif default_system %}{{ default_system }}"   # the model's own default system turn, whole
    r"{% endif %}"
    r"{% for message in messages %}"
    r"{% if message.role == 'system' and loop.first %}"
    r"{% elif message.role == 'assistant' %}"
    r"{{ '<|im_start|>assistant\n' + (message.content or '') }}"
    r"{% for call in (message.tool_calls or []) %}"
    r"{% if message.content or not loop.first %}{{ '\n' }}{% endif %}"
    # NOTE: the name as a JSON string (a plain name renders as before; one with a quote stays one string)
    r"""{{ '<tool_call>\n{"name": ' + (call.function.name | tojson) + ', "arguments": ' }}"""
    r"{% if call.function.arguments is string %}{{ call.function.arguments }}"
    r"{% else %}{{ call.function.arguments | tojson }}{% endif %}"
    r"{{ '}\n</tool_call>' }}"
    r"{% endfor %}"
    r"{{ '<|im_end|>\n' }}"
    r"{% elif message.role == 'tool' %}"
    r"{{ '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}"
    r"{% else %}"
    r"{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    r"{% endif %}"
    r"{% endfor %}"
    r"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# what a probe message says: a text no template writes of its own
PROBE_TEXT = "stepahead probe: where the first message starts"


def default_system_turn(tokenizer) -> str:
    """The system turn the model's own ChatML template writes before a first message that
    is not a system one (its default system prompt, whole: `<|im_start|>system ...
    <|im_end|>` and its newline), found by rendering one user message with it; "" when it
    writes none there (or is no ChatML template, or cannot render that message)."""
    from jinja2 import TemplateError

    if "<|im_start|>" not in (tokenizer.chat_template or ""):
        return ""
    try:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": PROBE_TEXT}], tokenize=False,
                                                 add_generation_prompt=False)
    except TemplateError:
        return ""
    head = rendered.find(f"<|im_start|>user\n{PROBE_TEXT}")
    turn = rendered[:max(head, 0)]
    return turn if turn.startswith("<|im_start|>system\n") and turn.endswith("<|im_end|>\n") else ""


def template_renders_tools(tokenizer) -> bool:
    return "tools" in (tokenizer.chat_template or "")


def tool_template(tokenizer) -> str | None:
    """The template to use when a request carries tools, or None if the model has none."""
    own = tokenizer.chat_template or ""
    if "tools" in own:
        return own
    if "<|im_start|>" in own or "<|im_start|>" in tokenizer.get_vocab():
        return CHATML_TOOLS_TEMPLATE
    return None


def has_tool_turns(messages: list[dict]) -> bool:
    """Whether `messages` hold tool calls or their results: rendered with the tool template
    even when the request offers no `tools` (a model's own template without tools drops
    `tool_calls` and has no `tool` role: the model would not see what it called, QA158)."""
    return any(message.get("tool_calls") or message.get("role") == "tool" for message in messages)


def supports_tools(tokenizer) -> bool:
    return tool_template(tokenizer) is not None


def content_text(content: Any) -> str:
    """OpenAI message content (None, a string, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "refusal":   # what an assistant said instead
            parts.append(str(part.get("refusal", "")))
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)


def normalize_messages(messages: list[dict]) -> list[dict]:
    """Copy of `messages` with text content (a refusal is the text the assistant said) and
    tool-call arguments as JSON strings."""
    normalized = []
    for message in messages:
        item = dict(message)
        item["content"] = content_text(message.get("content"))
        if not item["content"] and isinstance(message.get("refusal"), str):   # OpenAI's refusal reply shape
            item["content"] = message["refusal"]
        calls = message.get("tool_calls") or []
        if calls:
            item["tool_calls"] = [
                {"id": c.get("id"), "type": "function", "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments") if isinstance(
                        c["function"].get("arguments"), str) else json.dumps(
                        c["function"].get("arguments") or {})}}
                for c in calls]
        normalized.append(item)
    return normalized


def render_chat_prompt(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt for `messages` (generation prompt appended) as marked text: every client
    string (contents, names, tool calls, tool definitions) marked first, so the special
    tokens it spells are text, not control tokens (shards/special_text.py). Tokenize it with
    `MarkedTextEncoder` or `PromptTokenCache.encode(..., marked=True)`, never as it is."""
    template = tool_template(tokenizer) if tools or has_tool_turns(messages) else None
    if tools and template is None:
        raise ValueError("this model's chat template cannot render tools")
    # tool turns in ours, no tools: the system turn the model's own template writes (module docstring)
    default_system = default_system_turn(tokenizer) if template == CHATML_TOOLS_TEMPLATE and not tools else ""
    special = SpecialText.of(tokenizer)
    return tokenizer.apply_chat_template(
        special.mark(normalize_messages(messages)), tools=special.mark(tools) if tools else None,
        chat_template=template, add_generation_prompt=True, tokenize=False, default_system=default_system)


def render_chat_text(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt text for `messages` with the generation prompt appended, as the model reads it."""
    return SpecialText.of(tokenizer).unmark(render_chat_prompt(tokenizer, messages, tools))


def render_chat(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Prompt token ids for `messages` (chat template applied, generation prompt added); the
    client's text is text, whatever special token it spells."""
    prompt = render_chat_prompt(tokenizer, messages, tools)
    if MARK not in prompt:   # NOTE: the usual case, without copying the tokenizer
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    return MarkedTextEncoder.of(tokenizer).encode(prompt)
