"""Trace queries (FI21): `agent` means any step's agent, refused prompts stay out of the
token totals, a 405 on a session path lists every method that path takes, and the API's
`since` / `until` take the CLI's forms."""
from __future__ import annotations

import argparse
import json
from datetime import datetime

import httpx
import pytest

from agents_trace.api import Viewer
from agents_trace.records import StepResult
from agents_trace.store_queries import AGENT_SQL, SessionFilter, list_sessions, matching_session_keys
from agents_trace.store_schema import connect_reader, connect_writer
from agents_trace.store_stats import StatsWindow, tenant_stats
from agents_trace.time_points import parse_time_point
from agents_trace.traces_command import register

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app

KEYS = {"k-acme": Viewer("acme"), "k-admin": Viewer("ops", is_admin=True)}
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Find flights, then hotels."}]}
START_S = ManualClock().now_s   # 2023-11-14T22:13:20Z


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stepahead")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


async def _ask(app, method: str, path: str, key: str | None = "k-acme") -> httpx.Response:
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        return await client.request(method, path, headers=headers)


@pytest.fixture
def handoff(tmp_path):
    """Session "handoff": triage answers, then hands off to researcher (a step each, as an
    Agents SDK run tags them with x-agent-name); session "solo": triage alone."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for session, agents in (("handoff", ("triage", "researcher")), ("solo", ("triage",))):
        messages = list(BODY["messages"])
        for agent in agents:
            ctx = tracer.begin("acme", {"x-session-id": session, "x-agent-name": agent}, {**BODY, "messages": messages})
            clock.advance(0.5)
            tracer.end(ctx, StepResult(num_input_tokens=50, num_output_tokens=5, worker="w0", ttft_s=0.1,
                                       finish_reason="stop", output_text=f"{agent} done"))
            messages = [*messages, {"role": "assistant", "content": f"{agent} done"},
                        {"role": "user", "content": "go on"}]
            clock.advance(1.0)
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def test_agent_filter_finds_a_session_by_any_of_its_steps_agents(handoff, capsys):
    found = list_sessions(handoff, SessionFilter(agent="researcher"))["data"]
    assert [s["session"] for s in found] == ["handoff"]
    assert found[0]["agent"] == "triage"   # the row still shows its first agent
    assert {s["session"] for s in list_sessions(handoff, SessionFilter(agent="triage"))["data"]} == {"handoff", "solo"}
    assert matching_session_keys(handoff, SessionFilter(tenant="acme", agent="researcher")) == [("acme", "handoff")]
    assert list_sessions(handoff, SessionFilter(agent="nobody"))["data"] == []
    # the CLI's list and stats agree: one session, one step of researcher's
    assert _run(["traces", "list", "--agent", "researcher", "--json", "--db", str(handoff)]) == 0
    assert [s["session"] for s in json.loads(capsys.readouterr().out)["data"]] == ["handoff"]
    stats = tenant_stats(handoff, StatsWindow(agent="researcher"))["total"]
    assert (stats["sessions"], stats["steps"]) == (1, 1)


async def test_agent_filter_of_the_api_list_and_export(handoff):
    app = viewer_app(handoff, KEYS)
    listed = (await _ask(app, "GET", "/v1/traces/sessions?agent=researcher")).json()["data"]
    assert [(s["session"], s["agent"]) for s in listed] == [("handoff", "triage")]
    exported = (await _ask(app, "GET", "/v1/traces/export?agent=researcher")).text.splitlines()
    assert {json.loads(line)["session"] for line in exported[1:]} == {"handoff"} and len(exported) == 3


def test_agent_filter_is_one_index_look_up_per_session_built_for_an_older_store(handoff):
    with connect_reader(handoff) as db:
        plan = " ".join(row[3] for row in db.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM sessions WHERE tenant = ? AND {AGENT_SQL}", ("acme", "x")))
    assert "steps_by_session_agent" in plan
    # a store made before the index: a writer opening it builds it, and the data stays whole
    writer = connect_writer(handoff)
    writer.execute("DROP INDEX steps_by_session_agent")
    writer.close()
    assert [s["session"] for s in list_sessions(handoff, SessionFilter(agent="researcher"))["data"]] == ["handoff"]
    connect_writer(handoff).close()
    with connect_reader(handoff) as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "steps_by_session_agent" in names
    assert [s["session"] for s in list_sessions(handoff, SessionFilter(agent="researcher"))["data"]] == ["handoff"]


def test_stats_leave_a_refused_prompt_out_of_the_token_totals(tmp_path):
    """A 400 context_length_exceeded (no worker, nothing generated) counts as a step and an
    error, never as 25,000 prompt tokens; a step a model began (a worker named) counts."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for result in (StepResult(num_input_tokens=100, num_cached_tokens=80, num_output_tokens=5, worker="w0",
                              ttft_s=0.1, finish_reason="stop", output_text="ok"),
                   StepResult(num_input_tokens=25_000, error="context_length_exceeded"),
                   StepResult(num_input_tokens=38, error="rate_limit_exceeded"),
                   StepResult(num_input_tokens=60, num_cached_tokens=20, worker="w0", error="client_closed")):
        ctx = tracer.begin("acme", {"x-session-id": "s"}, BODY)
        clock.advance(0.5)
        tracer.end(ctx, result)
    tracer.stop()
    total = tenant_stats(tmp_path / "traces.sqlite3", StatsWindow())["total"]
    assert (total["steps"], total["errors"]) == (4, 3)
    assert (total["prompt_tokens"], total["cached_tokens"], total["output_tokens"]) == (160, 100, 5)
    assert total["cached_share"] == 0.625


def test_stats_of_only_refused_steps_have_zero_tokens(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    ctx = tracer.begin("acme", {"x-session-id": "s"}, BODY)
    tracer.end(ctx, StepResult(num_input_tokens=31, error="context_length_exceeded"))
    tracer.stop()
    total = tenant_stats(tmp_path / "traces.sqlite3", StatsWindow())["total"]
    assert (total["steps"], total["prompt_tokens"], total["cached_share"]) == (1, 0, None)


@pytest.mark.parametrize("method, path, allowed", [
    ("PUT", "/v1/traces/sessions/handoff", {"GET", "HEAD", "DELETE"}),
    ("POST", "/v1/traces/sessions/handoff", {"GET", "HEAD", "DELETE"}),
    ("DELETE", "/v1/traces/sessions/handoff/export", {"GET", "HEAD"}),
    ("PUT", "/v1/traces/sessions/handoff/export", {"GET", "HEAD"}),
    ("DELETE", "/v1/traces/sessions/handoff/steps/0/content", {"GET", "HEAD"}),
    ("DELETE", "/v1/traces/sessions/", {"GET", "HEAD"}),
])
async def test_a_405_on_a_session_path_lists_every_method_it_takes(handoff, method, path, allowed):
    app = viewer_app(handoff, KEYS)
    for key in ("k-acme", None):   # before authentication, as the router's own 405s
        answer = await _ask(app, method, path, key)
        assert answer.status_code == 405
        assert set(answer.headers["allow"].split(", ")) == allowed
    for method in allowed - {"DELETE"}:   # taken (no content captured here: a 404, not a 405)
        assert (await _ask(app, method, path)).status_code in (200, 307, 404)
    if "DELETE" in allowed:
        assert (await _ask(app, "DELETE", path)).json()["deleted"] is True


@pytest.mark.parametrize("text, expected", [
    ("90s", 1_800_000_000 - 90), ("2h", 1_800_000_000 - 7200), (" 1.5d ", 1_800_000_000 - 129_600),
    ("2026-12-01", datetime(2026, 12, 1).timestamp()),
    ("2026-12-01T14:30", datetime(2026, 12, 1, 14, 30).timestamp()),
    ("2026-12-01T14:30Z", 1_796_135_400.0), ("2026-12-01T14:30+01:00", 1_796_131_800.0),
])
def test_a_time_point_is_a_duration_back_or_a_date(text, expected):
    assert parse_time_point(text, 1_800_000_000.0) == expected
    assert parse_time_point(text, 1_800_000_000.0, unix_s_too=True) == expected


def test_unix_seconds_only_where_asked_and_nothing_else():
    assert parse_time_point("1700000000", 0.0, unix_s_too=True) == 1_700_000_000.0
    assert parse_time_point("0", 0.0, unix_s_too=True) == 0.0
    for text in ("30", "1700000000"):   # `--since 30` more likely meant minutes: refused
        with pytest.raises(ValueError):
            parse_time_point(text, 0.0)
    for text in ("yesterday", "-1", "2w", "nan", "inf", "1e13", "", "9" * 400 + "d", "0001-01-01"):
        with pytest.raises(ValueError, match="Unix seconds, a duration such as 30m, 2h or 7d, or a date"):
            parse_time_point(text, 1_800_000_000.0, unix_s_too=True)


async def test_the_api_takes_the_clis_since_and_until(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": "early"})
    clock.advance(3600)
    run_scripted_session(tracer, clock, headers={"x-session-id": "late"})
    tracer.stop()
    app = viewer_app(tracer, KEYS)

    async def sessions(query: str) -> set[str]:
        answer = await _ask(app, "GET", f"/v1/traces/sessions?{query}")
        assert answer.status_code == 200, answer.text
        return {s["session"] for s in answer.json()["data"]}

    assert await sessions("since=2023-11-14T22:30Z") == {"late"}
    assert await sessions("until=2023-11-14T22:30Z") == {"early"}
    assert await sessions(f"since={START_S + 1800:.0f}") == {"late"}   # Unix seconds, as before
    assert await sessions("since=100000d") == {"early", "late"} and await sessions("since=1d") == set()
    stats = (await _ask(app, "GET", "/v1/traces/stats?since=2023-11-14T22:30Z")).json()["total"]
    assert stats["steps"] == 3
    exported = (await _ask(app, "GET", "/v1/traces/export?until=2023-11-14T22:30Z")).text.splitlines()
    assert {json.loads(line)["session"] for line in exported[1:]} == {"early"}
    bad = await _ask(app, "GET", "/v1/traces/sessions?until=soon")
    detail = bad.json()["detail"]
    assert bad.status_code == 400 and (detail["param"], detail["code"]) == ("until", "invalid_value")
    assert "2h" in detail["message"] and "2026-12-01" in detail["message"] and "'soon'" in detail["message"]


def test_the_cli_reads_since_as_the_api_does(handoff, capsys):
    assert _run(["traces", "list", "--since", "2023-11-14T22:00Z", "--json", "--db", str(handoff)]) == 0
    assert {s["session"] for s in json.loads(capsys.readouterr().out)["data"]} == {"handoff", "solo"}
    assert _run(["traces", "list", "--until", "2023-11-14T22:00Z", "--db", str(handoff)]) == 0
    assert capsys.readouterr().out.strip() == "No sessions match."
    assert _run(["traces", "list", "--until", "soon", "--db", str(handoff)]) == 2
    assert "--until 'soon': give a duration such as 30m, 2h or 7d" in capsys.readouterr().err
