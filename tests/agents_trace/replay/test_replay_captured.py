"""Captured content, end to end: a gateway with capture_content on records a tool-using
agent and a completions client; the completions prompts show in the step-content endpoint
and `traces show --content`; the export (`traces export --all`) carries each chat step's
tools and tool_choice beside its messages and claims no chat for a completions step; and
the replay of that export, on another gateway, sends prompts of the recorded lengths."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import pytest

from agents_trace.replay.runner import ReplayOptions, replay
from cache.trace_format import read_trace
from gateway.app import build_app
from gateway.cli import main as cli_main
from gateway.config import key_digest, parse_config

from tests.conftest import TINY_GATEWAY_KEYS
from tests.gateway.serving import RunningServer, start_server

KEY = "sk-captured-acme"
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for name in ("get_weather", "book_table")]
TRIP = "captured-tools-trip"
COMPLETIONS = "captured-completions"


@dataclass(slots=True)
class Recorded:
    server: RunningServer
    app: object
    store_path: str

    def post(self, path: str, body: dict, session: str) -> dict:
        reply = httpx.post(f"{self.server.base_url}{path}", json=body, timeout=60,
                           headers={"authorization": f"Bearer {KEY}", "x-session-id": session})
        assert reply.status_code == 200, reply.text
        return reply.json()


def _run_agent(recorded: Recorded) -> None:
    """tool call -> tool result -> tool call -> tool result -> answer, the tools offered each time."""
    messages: list = [{"role": "system", "content": "You plan evenings."},
                      {"role": "user", "content": "Weather in Paris, then book a table."}]
    for tool in ("get_weather", "book_table", None):
        choice = {"type": "function", "function": {"name": tool}} if tool else "none"
        reply = recorded.post("/v1/chat/completions", {"model": "tiny", "messages": messages, "tools": TOOLS,
                                                        "tool_choice": choice, "max_tokens": 16, "seed": 7}, TRIP)
        message = {k: v for k, v in reply["choices"][0]["message"].items() if v is not None}
        messages.append(message)
        if tool is None:
            break
        [call] = message["tool_calls"]
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"{tool}: ok"})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Recorded:
    store_path = str(tmp_path_factory.mktemp("captured") / "traces.sqlite3")
    config = parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(KEY)]}],
        "tracing": {"store_path": store_path, "capture_content": True}})
    app = build_app(config)
    server = start_server(app, startup_timeout_s=300)
    recorded = Recorded(server, app, store_path)
    try:
        _run_agent(recorded)
        for prompt in ("Once upon a time", [5, 6, 7, 8, 9]):
            recorded.post("/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 3}, COMPLETIONS)
        tracer = app.state.gateway.tracer
        deadline_s = time.monotonic() + 10.0
        while tracer.num_steps_in_flight() and time.monotonic() < deadline_s:
            time.sleep(0.01)
        assert tracer.flush(10.0)
        yield recorded
    finally:
        server.stop()


def test_a_completions_prompt_is_captured_and_shown(recorded, capsys):
    base = f"{recorded.server.base_url}/v1/traces/sessions/{COMPLETIONS}/steps"
    contents = [httpx.get(f"{base}/{n}/content", headers={"authorization": f"Bearer {KEY}"}, timeout=30).json()
                for n in (0, 1)]
    assert [c["new_messages"] for c in contents] == [
        [{"role": "prompt", "content": "Once upon a time"}],
        [{"role": "prompt", "token_ids": [5, 6, 7, 8, 9], "content": "5 token ids"}]]
    assert cli_main(["traces", "show", COMPLETIONS, "--db", recorded.store_path, "--content"]) == 0
    shown = capsys.readouterr().out
    assert "#0 request:\n  prompt: Once upon a time\n" in shown
    assert "#1 request:\n  prompt: 5 token ids\n" in shown


def test_a_captured_export_replays_with_the_recorded_tools_and_prompt_lengths(recorded, tiny_gateway, tmp_path):
    out = tmp_path / "recorded.jsonl"
    assert cli_main(["traces", "export", "--all", "--db", recorded.store_path, "--output", str(out)]) == 0
    header, records = read_trace(out)
    trip = [r for r in records if r.session == TRIP]
    completions = [r for r in records if r.session == COMPLETIONS]
    assert [len(r.messages) for r in trip] == [2, 4, 6]
    assert len(completions) == 2 and all(r.messages is None for r in completions)   # no chat claimed
    recorded_tokens = [r.input_tokens for r in trip]
    assert recorded_tokens[0] > 100   # the tool schemas are most of the first prompt
    # replayed on another gateway (the shared tiny one: the same model, no content captured)
    options = ReplayOptions(base_url=tiny_gateway.base_url, api_key=TINY_GATEWAY_KEYS["tenant0"], model="tiny",
                            speed=50.0, progress=False)
    outcome = asyncio.run(replay(records, header, options))
    assert not outcome.interrupted and all(r.error is None for r in outcome.results), outcome.results
    replayed = {(r.session, r.step_index): r.prompt_tokens for r in outcome.results}
    assert [replayed[(TRIP, i)] for i in range(3)] == recorded_tokens
    assert [replayed[(COMPLETIONS, i)] for i in range(2)] == [r.input_tokens for r in completions]
    assert [r.tools for r in trip] == [TOOLS] * 3
    assert [r.tool_choice for r in trip] == [{"type": "function", "function": {"name": "get_weather"}},
                                             {"type": "function", "function": {"name": "book_table"}}, "none"]
