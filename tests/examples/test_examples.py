"""Each example runs against a real gateway serving the tiny model."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import TINY_GATEWAY_KEYS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(args, timeout_s=180):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _traced_steps(gateway, key, session, num_steps, timeout_s=30.0):
    """The session's steps from the trace API, once `num_steps` of them are stored."""
    url = f"{gateway.base_url}/v1/traces/sessions/{session}"
    deadline_s = time.monotonic() + timeout_s
    while True:
        answer = httpx.get(url, headers={"authorization": f"Bearer {key}"}, timeout=30)
        steps = answer.json()["steps"]["data"] if answer.status_code == 200 else []
        if len(steps) >= num_steps or time.monotonic() > deadline_s:
            assert len(steps) >= num_steps, (answer.status_code, answer.text[:500])
            return steps
        time.sleep(0.1)


def test_openai_agent_loop_runs_tools_and_hits_cache(tiny_gateway):
    out = _run([str(EXAMPLES / "openai_agent_loop.py"), "--base-url", f"{tiny_gateway.base_url}/v1",
                "--api-key", TINY_GATEWAY_KEYS["tenant0"], "--model", "tiny", "--max-steps", "3"])
    steps = out["steps"]
    assert steps[0]["tool_calls"] and steps[0]["tool_calls"][0] in ("get_weather", "add")
    assert len(steps) >= 2
    assert steps[1]["cached"] > 0  # the second step reuses the first step's prefix


def test_langchain_agent_runs_a_tool_step(tiny_gateway):
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
    out = _run([str(EXAMPLES / "langchain_agent.py"), "--base-url", f"{tiny_gateway.base_url}/v1",
                "--api-key", TINY_GATEWAY_KEYS["tenant1"], "--max-steps", "2"])   # --model: the gateway's first
    assert out["steps"][0]["tool_calls"]
    assert out["steps"][-1]["input_tokens"] > out["steps"][0]["input_tokens"]
    assert set(out["report"]) == {"city", "forecast", "celsius"}  # with_structured_output parsed it


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_openai_agents_sdk_agent_gets_a_typed_report(tiny_gateway, api):
    pytest.importorskip("agents", reason="openai-agents is not installed")
    out = _run([str(EXAMPLES / "openai_agents_sdk.py"), "--base-url", f"{tiny_gateway.base_url}/v1",
                "--api-key", TINY_GATEWAY_KEYS["tenant2"], "--model", "tiny", "--api", api])
    assert set(out["report"]) == {"city", "forecast", "celsius"}  # the SDK parsed the final output
    assert out["tools_called"][0] == "get_weather" and out["requests"] >= 2  # a tool turn, then the report
    assert out["cached_tokens"] > 0  # later turns re-send the first one: served from the prefix cache
    # the example names its agent (x-agent-name via ModelSettings.extra_headers): each traced step carries it
    steps = _traced_steps(tiny_gateway, TINY_GATEWAY_KEYS["tenant2"], out["session"], out["requests"])
    assert {step["agent"] for step in steps} == {"weather"}


def test_openai_agents_sdk_run_kept_in_a_conversation(tiny_gateway):
    pytest.importorskip("agents", reason="openai-agents is not installed")
    out = _run([str(EXAMPLES / "openai_agents_sdk.py"), "--base-url", f"{tiny_gateway.base_url}/v1",
                "--api-key", TINY_GATEWAY_KEYS["tenant2"], "--conversation"])   # --model: the gateway's first
    assert set(out["report"]) == {"city", "forecast", "celsius"} and out["tools_called"][0] == "get_weather"
    # the gateway kept the whole run: the question, the call, its result, the report
    assert out["conversation_items"][:3] == ["message", "function_call", "function_call_output"]
    assert out["conversation_items"][-1] == "message" and out["cached_tokens"] > 0


def test_openai_agents_sdk_stops_at_max_turns_with_one_line(tiny_gateway):
    """QA232 F3: `--max-turns 1` ended in the SDK's MaxTurnsExceeded traceback."""
    pytest.importorskip("agents", reason="openai-agents is not installed")
    done = subprocess.run([sys.executable, str(EXAMPLES / "openai_agents_sdk.py"), "--base-url",
                           f"{tiny_gateway.base_url}/v1", "--api-key", TINY_GATEWAY_KEYS["tenant2"], "--model", "tiny",
                           "--max-turns", "1"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == ("no final answer within --max-turns 1: the model kept calling tools (its turns "
                                   "are in the gateway's trace of this session)")


def test_batch_requests_runs_a_file_of_requests(tiny_gateway):
    out = _run([str(EXAMPLES / "batch_requests.py"), "--base-url", f"{tiny_gateway.base_url}/v1",
                "--api-key", TINY_GATEWAY_KEYS["tenant1"], "--count", "6"])   # the gateway's first model
    assert out["status"] == "completed" and (out["completed"], out["failed"]) == (6, 0)
    assert out["cached_tokens"] > 0   # the shared system prompt was prefilled once


def test_batch_requests_says_why_lines_failed(tiny_gateway):
    done = subprocess.run([sys.executable, str(EXAMPLES / "batch_requests.py"), "--base-url",
                           f"{tiny_gateway.base_url}/v1", "--api-key", TINY_GATEWAY_KEYS["tenant1"],
                           "--model", "no-such-model", "--count", "2"], capture_output=True, text=True, timeout=180)
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1])["status"] == "failed"   # the file names a model not served: failed at create
    assert done.returncode == 1   # so did the run (it exited 0 once)
    assert [line.split(" failed: ")[1].split(":")[0] for line in lines[:-1]] == ["model_not_found"]
    assert lines[0].endswith("(line 1)") and "no-such-model" in lines[0]



@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")))
def test_each_examples_help_describes_it_in_whole_sentences(script):
    """The description is the docstring's first paragraph, not its first line cut mid-sentence."""
    import ast

    docstring = ast.get_docstring(ast.parse((EXAMPLES / script).read_text()))
    expected = " ".join(docstring.split("\n\n")[0].split())
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected.endswith(".") and expected in " ".join(done.stdout.split())
