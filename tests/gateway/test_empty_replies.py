"""A reply with no text and no tool call: its assistant message has `content: ""`, so an
agent can send it back as it came (an assistant message needs content or tool calls)."""
from __future__ import annotations

import httpx

from gateway.collected import Collected
from gateway.openai_format import chat_message

EOS = "257"   # the tiny model's end-of-sequence token: a bias on it ends the reply at once
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def test_an_empty_message_has_empty_text_and_null_only_beside_tool_calls():
    assert chat_message(Collected()) == {"role": "assistant", "content": ""}


def test_an_empty_reply_can_be_sent_back_as_it_came(gateway):
    for extra in ({}, {"tools": TOOLS, "tool_choice": "auto"}):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                "logit_bias": {EOS: 100}, **extra}
        reply = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, headers=gateway.headers(),
                           timeout=60)
        assert reply.status_code == 200, reply.text
        choice = reply.json()["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "", "refusal": None, "annotations": []}
        assert reply.json()["usage"]["completion_tokens"] == 0
        again = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=gateway.headers(), timeout=60, json={
            **body, "messages": [*body["messages"], choice["message"], {"role": "user", "content": "and?"}]})
        assert again.status_code == 200, again.text
