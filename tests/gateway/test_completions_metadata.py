"""Legacy completions check `metadata` as chat does (QA230 F1): its `session_id` names the
traced session, so a malformed one (not a string, `metadata` not an object, more than 16
pairs, a key over 64 characters, a value over 512) is the same 400 on both endpoints, never
a 200 under a fresh session (gateway/request_metadata.py; docs/api.md, "Completions")."""
from __future__ import annotations

import time

import httpx
import pytest

from gateway.errors import ApiError
from gateway.schemas import CompletionRequest, validate

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
COMPLETION = {"model": "tiny", "prompt": "x", "max_tokens": 1}
MALFORMED = [{"session_id": 5}, {"session_id": ["a"]}, "notadict", {f"k{i}": "v" for i in range(17)},
             {"k" * 65: "v"}, {"k": "v" * 513}]


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}{path}", json=body, headers=gateway.headers("alpha"), timeout=60)


@pytest.mark.parametrize("metadata", MALFORMED)
def test_malformed_metadata_is_the_same_400_on_completions_as_on_chat(gateway, metadata):
    chat = post(gateway, "/v1/chat/completions", {**CHAT, "metadata": metadata})
    completion = post(gateway, "/v1/completions", {**COMPLETION, "metadata": metadata})
    assert chat.status_code == 400, chat.text
    assert completion.status_code == 400, completion.text
    assert completion.json()["error"] == chat.json()["error"]
    assert completion.json()["error"]["param"].startswith("metadata")
    assert "x-session-id" not in completion.headers, "a request refused as invalid was traced"


def test_a_string_session_id_still_names_the_completions_session(gateway):
    session = f"completions-metadata-{time.time_ns()}"
    reply = post(gateway, "/v1/completions", {**COMPLETION, "metadata": {"session_id": session, "k": "v"}})
    assert reply.status_code == 200 and reply.headers["x-session-id"] == session


@pytest.mark.parametrize("metadata", MALFORMED[:3])
def test_the_completions_schema_types_metadata_as_chats(metadata):
    with pytest.raises(ApiError) as refused:
        validate(CompletionRequest, {**COMPLETION, "metadata": metadata})
    assert refused.value.status == 400 and refused.value.param.startswith("metadata")
    assert validate(CompletionRequest, {**COMPLETION, "metadata": None}).metadata is None
