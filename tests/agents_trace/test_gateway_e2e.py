"""Agent sessions traced end to end through the real gateway (uvicorn, the tiny model on a
real worker process, the OpenAI client): spans, prefix stitching, tenant isolation, the
viewer API, export (HTTP and CLI) and the /ui page in headless Chromium.

The tiny model writes random text, so tool calls are forced with a named `tool_choice`
(the gateway then emits a real call with its own id) and the agent loop runs the "tools"
itself, sleeping for a known time.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx
import pytest
from openai import OpenAI
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import build_app
from gateway.cli import main as cli_main
from gateway.config import key_digest, parse_config

from tests.agents_trace.browser import chromium_driver, connect, wait_for
from tests.gateway.serving import RunningServer, start_server

KEYS = {"acme": "sk-e2e-acme", "globex": "sk-e2e-globex", "ops": "sk-e2e-ops"}
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}} for name in ("get_weather", "book_table")]
TOOL_S = {"get_weather": 0.4, "book_table": 0.7}
GAP_TOLERANCE_S = 0.3


@dataclass(slots=True)
class Served:
    server: RunningServer
    app: object
    exporter: InMemorySpanExporter
    store_path: str

    @property
    def tracer(self):
        return self.app.state.gateway.tracer

    def client(self, tenant: str) -> OpenAI:
        return OpenAI(base_url=f"{self.server.base_url}/v1", api_key=KEYS[tenant],
                      timeout=60, max_retries=0)

    def get(self, path: str, tenant: str) -> httpx.Response:
        return httpx.get(f"{self.server.base_url}{path}", timeout=30,
                         headers={"authorization": f"Bearer {KEYS[tenant]}"})

    def post(self, path: str, tenant: str, body: dict, headers: dict | None = None) -> httpx.Response:
        return httpx.post(f"{self.server.base_url}{path}", json=body, timeout=60,
                          headers={"authorization": f"Bearer {KEYS[tenant]}", **(headers or {})})

    def settle(self) -> None:
        """Every step the client has seen the end of is in the store. A streamed step ends in
        the gateway just after its last chunk is sent, so wait for that before flushing."""
        deadline_s = time.monotonic() + 10.0
        while self.tracer.num_steps_in_flight() and time.monotonic() < deadline_s:
            time.sleep(0.01)
        assert self.tracer.num_steps_in_flight() == 0
        assert self.tracer.flush(10.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    store_path = str(tmp_path_factory.mktemp("e2e") / "traces.sqlite3")
    config = parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)], "admin": name == "ops"}
                    for name, key in KEYS.items()],
        "tracing": {"store_path": store_path, "capture_content": True}})
    app = build_app(config)
    server = start_server(app, startup_timeout_s=300)
    exporter = InMemorySpanExporter()
    app.state.gateway.tracer.add_span_processor(SimpleSpanProcessor(exporter))
    yield Served(server, app, exporter, store_path)
    server.stop()


def _streamed_message(stream) -> dict:
    """The assistant message a streamed reply amounts to (what an agent appends)."""
    text, calls = "", {}
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": None, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                call["id"] = call["id"] or delta.id
                call["function"]["name"] += delta.function.name or ""
                call["function"]["arguments"] += delta.function.arguments or ""
    message = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run_agent(client: OpenAI, *, headers: dict | None = None, stream: bool = False,
              topic: str = "Paris") -> list[dict]:
    """tool call -> tool result -> tool call -> tool result -> answer."""
    messages: list = [{"role": "system", "content": "You plan evenings."},
                      {"role": "user", "content": f"Weather in {topic}, then book a table."}]
    replies = []
    for tool in ("get_weather", "book_table", None):
        options = {"tool_choice": {"type": "function", "function": {"name": tool}}} if tool \
            else {"tool_choice": "none"}
        request = dict(model="tiny", messages=messages, tools=TOOLS, max_tokens=24, seed=7,
                       extra_headers=headers or {}, **options)
        if stream:
            message = _streamed_message(client.chat.completions.create(stream=True, **request))
        else:
            message = client.chat.completions.create(**request).choices[0].message.model_dump(
                exclude_none=True)
        replies.append(message)
        messages.append(message)
        if tool is None:
            break
        [call] = message["tool_calls"]
        assert call["function"]["name"] == tool
        time.sleep(TOOL_S[tool])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"{tool}: ok"})
    return replies


def _spans_of(served: Served, session: str) -> dict[str, list]:
    spans = [s for s in served.exporter.get_finished_spans()
             if s.attributes.get("gen_ai.conversation.id") == session]
    out: dict[str, list] = {"invoke_agent": [], "chat": [], "execute_tool": []}
    for span in spans:
        out[span.attributes["gen_ai.operation.name"]].append(span)
    return out


def _end_sessions(served: Served) -> None:
    served.tracer.end_all_sessions()
    served.settle()


@pytest.fixture(scope="module")
def trip(served) -> str:
    """One scripted agent run of tenant acme, session "e2e-trip", ended and written."""
    run_agent(served.client("acme"), headers={"x-session-id": "e2e-trip",
                                              "x-agent-name": "planner"})
    _end_sessions(served)
    return "e2e-trip"


def test_e2e_three_step_agent_session_spans(served, trip):
    spans = _spans_of(served, trip)
    [agent] = spans["invoke_agent"]
    chats = sorted(spans["chat"], key=lambda s: s.attributes["stepahead.step.index"])
    tools = sorted(spans["execute_tool"], key=lambda s: s.start_time)
    assert (len(chats), len(tools)) == (3, 2)
    assert agent.name == "invoke_agent planner" and agent.parent is None
    assert all(s.parent.span_id == agent.context.span_id for s in chats + tools)
    assert [s.name for s in chats] == ["chat tiny"] * 3
    assert [s.attributes["gen_ai.request.model"] for s in chats] == ["tiny"] * 3
    assert [s.attributes["stepahead.step.tool_calls"] for s in chats] == [
        ("get_weather",), ("book_table",), ()]
    assert [s.name for s in tools] == ["execute_tool get_weather", "execute_tool book_table"]
    assert all(s.attributes["gen_ai.tool.call.id"].startswith("call_") for s in tools)
    for span, expected_s in zip(tools, TOOL_S.values()):
        assert abs((span.end_time - span.start_time) / 1e9 - expected_s) < GAP_TOLERANCE_S
    for span in chats:
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["stepahead.worker"] == "w0"
        assert span.attributes["stepahead.ttft_s"] > 0
        assert "gen_ai.response.time_to_first_chunk" not in span.attributes   # not streamed
        assert "gen_ai.usage.cache_read.input_tokens" in span.attributes
    assert chats[2].attributes["gen_ai.usage.cache_read.input_tokens"] > 0   # prefix reuse


def test_e2e_session_without_header_is_stitched_by_prefix(served):
    run_agent(served.client("acme"), stream=True, topic="Lyon")
    served.settle()
    found = served.get("/v1/traces/sessions?limit=500", "acme").json()["data"]
    inferred = [s for s in found if s["source"] == "new" and s["agent"] is None]
    assert len(inferred) == 1
    session = inferred[0]["session"]
    steps = served.get(f"/v1/traces/sessions/{session}", "acme").json()["steps"]["data"]
    assert [s["session_source"] for s in steps] == ["new", "prefix", "prefix"]
    assert [s["after_label"] for s in steps] == ["start", "tool:get_weather", "tool:book_table"]
    assert [[c["name"] for c in s["tool_calls"]] for s in steps] == [
        ["get_weather"], ["book_table"], []]
    assert all(s["is_stream"] for s in steps)
    for step, expected_s in zip(steps[1:], TOOL_S.values()):
        assert abs(step["gap_s"] - expected_s) < GAP_TOLERANCE_S


def test_e2e_each_answer_names_its_request_and_the_session_it_was_traced_under(served):
    """So a developer can open the session the gateway stitched or opened for an agent that
    named none (`stepahead traces show ID --follow`, /ui), and find a request's step."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Where is Lyon?"}], "max_tokens": 2}
    opened = served.post("/v1/chat/completions", "acme", body)
    named = served.post("/v1/chat/completions", "acme", {**body, "metadata": {"session_id": "trip 42/ü"}})
    with httpx.stream("POST", f"{served.server.base_url}/v1/chat/completions", json={**body, "stream": True},
                      headers={"Authorization": f"Bearer {KEYS['acme']}", "x-session-id": "streamed"},
                      timeout=60) as streamed:
        streamed.read()
    served.settle()
    assert opened.headers["x-request-id"] == opened.json()["id"]
    session = opened.headers["x-session-id"]
    assert session.startswith("sess_")
    [step] = served.get(f"/v1/traces/sessions/{session}", "acme").json()["steps"]["data"]
    assert step["request_id"] == opened.json()["id"]
    assert named.headers["x-session-id"] == "trip 42/%C3%BC"   # past printable ASCII: percent-encoded
    assert streamed.headers["x-session-id"] == "streamed" and streamed.headers["x-request-id"].startswith("chatcmpl-")
    # each request id finds its session in the list's filter (as /ui's), its own tenant's only
    for answer, session_id in ((opened, session), (named, "trip 42/ü"), (streamed, "streamed")):
        query = f"/v1/traces/sessions?id_contains={answer.headers['x-request-id']}"
        assert [s["session"] for s in served.get(query, "acme").json()["data"]] == [session_id]
        assert served.get(query, "globex").json()["data"] == []


def test_e2e_a_session_id_with_a_slash_is_read_exported_and_deleted_over_http(served):
    """The id a client names (`proj/run-1`) opens as /ui sends it (`%2F`) and typed plain."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Slashes?"}], "max_tokens": 2}
    answer = served.post("/v1/chat/completions", "acme", body, headers={"x-session-id": "proj/run-1"})
    assert answer.headers["x-session-id"] == "proj/run-1"
    served.settle()
    for path in ("/v1/traces/sessions/proj%2Frun-1", "/v1/traces/sessions/proj/run-1"):
        detail = served.get(path, "acme")
        assert detail.status_code == 200 and detail.json()["session"]["session"] == "proj/run-1"
        assert served.get(path + "/steps/0/content", "acme").json()["output"] is not None
        exported = served.get(path + "/export", "acme").text.splitlines()
        assert len(exported) == 2 and json.loads(exported[1])["session"] == "proj/run-1"
    hidden = served.get("/v1/traces/sessions/proj%2Frun-1", "globex")
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "not_found"
    deleted = httpx.delete(f"{served.server.base_url}/v1/traces/sessions/proj%2Frun-1", timeout=30,
                           headers={"authorization": f"Bearer {KEYS['acme']}"})
    assert deleted.status_code == 200 and deleted.json()["id"] == "proj/run-1"
    assert served.get("/v1/traces/sessions/proj/run-1", "acme").status_code == 404


def _scripted(step: int) -> list[dict]:
    """An identical, fully scripted conversation prefix (fixed tool-call ids)."""
    messages = [{"role": "system", "content": "Same prompt for everyone."},
                {"role": "user", "content": "Same question."}]
    for i, tool in enumerate(("get_weather", "book_table")[:step]):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_fixed_{i}", "type": "function",
             "function": {"name": tool, "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": f"call_fixed_{i}", "content": "ok"}]
    return messages


def test_e2e_identical_conversations_of_two_tenants_are_never_stitched(served):
    clients = {tenant: served.client(tenant) for tenant in ("acme", "globex")}
    for step in range(3):
        for tenant, client in clients.items():
            client.chat.completions.create(model="tiny", messages=_scripted(step), max_tokens=4,
                                           extra_headers={"x-agent-name": "same-agent"})
    served.settle()
    sessions = {}
    for tenant in clients:
        found = served.get("/v1/traces/sessions?agent=same-agent", tenant).json()["data"]
        assert [(s["tenant"], s["num_steps"]) for s in found] == [(tenant, 3)]
        sessions[tenant] = found[0]["session"]
        steps = served.get(f"/v1/traces/sessions/{found[0]['session']}", tenant).json()
        assert [s["after_label"] for s in steps["steps"]["data"]] == [
            "start", "tool:get_weather", "tool:book_table"]
    assert served.get(f"/v1/traces/sessions/{sessions['acme']}", "globex").status_code == 404
    admin = served.get("/v1/traces/sessions?agent=same-agent", "ops").json()["data"]
    assert sorted(s["tenant"] for s in admin) == ["acme", "globex"]


def test_e2e_export_over_http_and_cli(served, trip, tmp_path):
    response = served.get("/v1/traces/sessions/e2e-trip/export", "acme")
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[0]["format"] == "stepahead-trace/1"
    assert [line["after"] for line in lines[1:]] == ["start", "tool:get_weather",
                                                     "tool:book_table"]
    assert [line["tool_calls"] for line in lines[1:]] == [["get_weather"], ["book_table"], []]
    assert [len(line["messages"]) for line in lines[1:]] == [2, 4, 6]
    assert served.get("/v1/traces/sessions/e2e-trip/export", "globex").status_code == 404
    out = tmp_path / "trip.jsonl"
    assert cli_main(["traces", "export", "--session", "e2e-trip", "--db", served.store_path,
                     "--output", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines


def test_e2e_viewer_page_shows_the_timeline_in_chromium(served, trip, tmp_path):
    from selenium.webdriver.common.by import By
    base_url = served.server.base_url
    with chromium_driver() as driver:
        connect(driver, base_url, KEYS["acme"])
        wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, "e2e-trip")).click()
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
        table = driver.find_element(By.ID, "steps").text
        for expected in ("tool:get_weather", "tool:book_table", "get_weather", "book_table",
                         "text answer", "w0"):
            assert expected in table
        assert len(driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .tool-bar")) == 2
        assert len(driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .llm-bar")) == 3
        assert "planner" in driver.find_element(By.ID, "session-summary").text
        driver.save_screenshot(str(tmp_path / "e2e-timeline.png"))
        assert (tmp_path / "e2e-timeline.png").stat().st_size > 10_000
        connect(driver, base_url, KEYS["globex"])
        driver.get(f"{base_url}/ui#/session/acme/e2e-trip")
        wait_for(driver, lambda d: "not found" in d.find_element(By.ID, "status").text)
    assert served.get("/v1/traces/sessions/e2e-trip", "globex").status_code == 404
    error = served.get("/v1/traces/sessions/e2e-trip", "globex").json()["error"]
    assert error["code"] == "not_found"


def test_e2e_incoming_traceparent_is_continued(served):
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    served.client("acme").chat.completions.create(
        model="tiny", max_tokens=2, messages=[{"role": "user", "content": "traced call"}],
        extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01", "x-session-id": "tp"})
    _end_sessions(served)
    spans = _spans_of(served, "tp")
    [agent], [chat] = spans["invoke_agent"], spans["chat"]
    for span in (agent, chat):
        assert f"{span.context.trace_id:032x}" == trace_id
        assert f"{span.parent.span_id:016x}" == parent_id and span.parent.is_remote


def test_e2e_step_with_deeply_nested_tool_arguments_is_traced(served):
    """Arguments are parsed to digest the conversation; ones nested past the parser's limit
    stay text, and the step is still recorded (it used to go untraced)."""
    deep_arguments = "[" * 1500 + "]" * 1500
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": deep_arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    served.client("acme").chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=2,
                                                  extra_headers={"x-session-id": "deep-arguments"})
    served.settle()
    steps = served.get("/v1/traces/sessions/deep-arguments", "acme").json()["steps"]["data"]
    assert len(steps) == 1 and steps[0]["session_source"] == "header"


@pytest.mark.parametrize("stream", [False, True])
def test_e2e_every_choice_of_an_n3_request_is_traced(served, stream):
    """n = 3 through the real gateway: the step keeps all three choices' finish reasons, tool
    calls and (content being captured) texts, not choice 0's alone."""
    session = f"n3-{stream}"
    reply = served.client("acme").chat.completions.create(
        model="tiny", n=3, max_tokens=6, seed=3, stream=stream, messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-session-id": session})
    if stream:
        texts = {}
        for chunk in reply:
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        texts = [texts[i] for i in range(3)]
    else:
        texts = [choice.message.content for choice in reply.choices]
    served.settle()
    [step] = served.get(f"/v1/traces/sessions/{session}", "acme").json()["steps"]["data"]
    assert [c["finish_reason"] for c in step["other_choices"]] == ["length", "length"]
    content = served.get(f"/v1/traces/sessions/{session}/steps/0/content", "acme").json()
    assert [content["output"]["content"]] + [o["content"] for o in content["other_outputs"]] == texts
    [chat] = _spans_of(served, session)["chat"]
    assert list(chat.attributes["gen_ai.response.finish_reasons"]) == ["length"] * 3
    assert [m["parts"][0]["content"] for m in json.loads(chat.attributes["gen_ai.output.messages"])] == texts


def test_e2e_a_background_response_is_traced_like_a_foreground_one(served):
    """The run outlives its request; its step still ends with the reply it generated."""
    client = served.client("acme")
    started = client.responses.create(model="tiny", input="traced in the background", max_output_tokens=5,
                                      background=True, extra_headers={"x-session-id": "background"})
    deadline_s = time.monotonic() + 60
    while (done := client.responses.retrieve(started.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline_s
        time.sleep(0.05)
    served.settle()
    [step] = served.get("/v1/traces/sessions/background", "acme").json()["steps"]["data"]
    assert step["error"] is None and step["num_output_tokens"] == done.usage.output_tokens
    content = served.get("/v1/traces/sessions/background/steps/0/content", "acme").json()
    assert (content["output"]["content"] or "") == done.output_text   # a reply of no text is stored as none


def test_e2e_a_steps_service_tier_is_traced_in_its_span_and_the_store(served):
    client = served.client("acme")
    for tier in ("flex", None):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "tiered"}], max_tokens=2,
                                       extra_headers={"x-session-id": "tiers"},
                                       **({"service_tier": tier} if tier else {}))
    served.settle()
    steps = served.get("/v1/traces/sessions/tiers", "acme").json()["steps"]["data"]
    assert [step["service_tier"] for step in steps] == ["flex", "default"]
    exported = served.get("/v1/traces/sessions/tiers/export", "acme").text.splitlines()[1:]
    assert [json.loads(line).get("service_tier") for line in exported] == ["flex", None]   # the simulator reads it
    _end_sessions(served)
    chats = [s for s in _spans_of(served, "tiers")["chat"]]
    assert sorted(s.attributes["stepahead.service_tier"] for s in chats) == ["default", "flex"]


def test_e2e_bad_trace_query_is_an_openai_shaped_400_naming_the_parameter(served):
    reply = served.get("/v1/traces/sessions?limit=5000", "acme")
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "limit" and error["code"] == "integer_above_max_value"
    assert error["message"] == "Query parameter 'limit' must be a number in [1, 500], not '5000'."


def _long_scripted(step: int) -> list[dict]:
    """`_scripted` behind a system prompt several fingerprint blocks long."""
    messages = _scripted(step)
    return [{"role": "system", "content": "You plan evenings for busy people. " * 40}, *messages[1:]]


def test_e2e_exported_traffic_carries_prompt_fingerprints_that_replay_its_sharing(served, tmp_path, capsys):
    from cache.sim.cli import main as sim_main
    for step in range(3):
        for tenant in ("acme", "globex"):
            served.client(tenant).chat.completions.create(
                model="tiny", messages=_long_scripted(step), max_tokens=4,
                extra_headers={"x-agent-name": "fingerprinted"})
    served.settle()
    response = served.get("/v1/traces/export?agent=fingerprinted", "ops")
    header, *lines = [json.loads(line) for line in response.text.splitlines()]
    assert header["block_size"] == 64 and len(lines) == 6
    by_tenant: dict[str, list[list[int]]] = {}
    for line in lines:
        ids = line["hash_ids"]
        assert len(ids) == -(-line["input_tokens"] // 64) and all(0 <= i < 2 ** 53 for i in ids)
        by_tenant.setdefault(line["tenant"], []).append(ids)
    for steps in by_tenant.values():
        assert len(steps[0]) >= 4
        for before, after in zip(steps, steps[1:]):   # each step extends the last: its full blocks stay
            assert len(after) > len(before) and after[:len(before) - 1] == before[:len(before) - 1]
    assert not set(sum(by_tenant["acme"], [])) & set(sum(by_tenant["globex"], []))   # never shared
    # memory is ample here: each step finds cached at least what its previous step's prompt shared with it
    [session] = served.get("/v1/traces/sessions?agent=fingerprinted", "acme").json()["data"]
    steps = served.get(f"/v1/traces/sessions/{session['session']}", "acme").json()["steps"]["data"]
    shared = [s["prefix_from_previous_tokens"] for s in steps]
    assert shared[0] is None and all(n >= 4 * 64 for n in shared[1:])
    assert all(s["num_cached_tokens"] >= s["prefix_from_previous_tokens"] for s in steps[1:])
    # the same, live, in the tenant's metrics (every acme session of this module counts; none lost a prefix)
    metrics = served.get("/metrics", "acme").text
    counted = {name: sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                         if line.startswith(name + "{") and 'tenant="acme"' in line)
               for name in ("stepahead_prefix_from_previous_tokens_total", "stepahead_evicted_prefix_tokens_total")}
    assert counted["stepahead_prefix_from_previous_tokens_total"] >= sum(shared[1:])
    assert counted["stepahead_evicted_prefix_tokens_total"] == 0
    trace = tmp_path / "recorded.jsonl"
    trace.write_text(response.text)
    assert sim_main(["--trace", str(trace), "--hot-blocks", "1000", "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert simulated["requests"] == 6 and simulated["block_hit_rate"] > 0.4
