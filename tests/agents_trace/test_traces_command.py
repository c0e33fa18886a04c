"""`stepahead traces list | show | export` read the store directly: tables of sessions and
steps, a session's conversation, and stepahead-trace/1 files."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

from agents_trace.header_ids import encode_header_id
from agents_trace.records import StepResult
from agents_trace.traces_command import register
from cache.forecast import Forecast
from cache.trace_format import read_trace

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stepahead")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


@pytest.fixture
def store(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "s1"})
    run_scripted_session(tracer, clock, tenant="globex", headers={"x-session-id": "s1"})
    run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "only"})
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def test_traces_export_writes_the_session(store, tmp_path, capsys):
    out = tmp_path / "only.jsonl"
    assert _run(["traces", "export", "--session", "only", "--db", str(store),
                 "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["format"] == "stepahead-trace/1"
    assert [line["after"] for line in lines[1:]] == ["start", "tool:get_weather",
                                                     "tool:book_table"]


def test_export_and_delete_take_the_session_as_show_does(store, tmp_path, capsys):
    """QA216 F5: `traces show ID` takes the id positionally, and so do export and delete;
    one of SESSION, --session and --all, never two, never none."""
    assert _run(["traces", "export", "only", "--db", str(store)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    refused = ((["only", "--all"], "not SESSION and --all"), (["only", "--session", "only"], "not SESSION and --session"),
               ([], ""))
    for argv, says in refused:
        for command, more in (("export", []), ("delete", ["--yes"])):
            assert _run(["traces", command, *argv, *more, "--db", str(store)]) == 2
            err = capsys.readouterr().err
            assert err.startswith("stepahead: name one session (SESSION or --session SESSION) or --all") and says in err
    assert _run(["traces", "delete", "only", "--yes", "--db", str(store)]) == 0
    assert _run(["traces", "show", "only", "--db", str(store)]) == 1


def test_traces_export_needs_tenant_for_ambiguous_id(store, capsys):
    assert _run(["traces", "export", "--session", "s1", "--db", str(store)]) == 2
    assert "--tenant" in capsys.readouterr().err
    assert _run(["traces", "export", "--session", "s1", "--tenant", "globex",
                 "--db", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and json.loads(lines[1])["tenant"] == "globex"


def test_traces_export_reads_store_path_from_config(store, tmp_path, capsys):
    config = tmp_path / "gw.toml"
    config.write_text(f'[tracing]\nstore_path = "{store}"\n')
    assert _run(["traces", "export", "--session", "only", "--config", str(config)]) == 0
    assert _run(["traces", "export", "--session", "nope", "--config", str(config)]) == 1


def test_traces_export_bad_store_or_output_is_an_error_line(store, tmp_path, capsys):
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("not sqlite " * 200)
    for db, code, message in ((tmp_path / "missing.sqlite3", 1, "no trace store at"),
                              (tmp_path, 2, "is a directory, not a trace store"),   # a wrong path, not "none yet"
                              (not_a_db, 2, "cannot read the trace store")):
        assert _run(["traces", "export", "--session", "only", "--db", str(db)]) == code
        assert message in capsys.readouterr().err
    assert _run(["traces", "export", "--session", "only", "--db", str(store), "--output", str(tmp_path)]) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("output", [".", "/", "{dir}", "{dir}/no/such/x.jsonl"])
def test_traces_export_to_a_path_it_cannot_write_is_one_line_naming_it(store, tmp_path, monkeypatch, capsys,
                                                                       output):
    monkeypatch.chdir(tmp_path)
    output = output.format(dir=tmp_path)
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", output]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepahead: cannot write {output}: ") and err.count("\n") == 1, err
    assert "partial" not in err and not [p for p in tmp_path.iterdir() if not p.name.startswith("traces.sqlite3")]

@pytest.fixture
def forecast_store(tmp_path):
    """One session of tenant acme with content captured and a forecast checked at each step."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    tracer.set_forecaster(lambda tenant, session, now_s: Forecast(
        tenant, session, now_s, next_step={"get_weather": 0.62, "END": 0.1}, p_end=0.1,
        confident=False))
    run_scripted_session(tracer, clock, headers={"x-session-id": "fc", "x-agent-name": "travel"})
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The table's rows split on its column gaps (two or more spaces), after `heading`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_traces_list_prints_the_sessions_most_recent_first(store, capsys):
    assert _run(["traces", "list", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    rows = _table_rows(out, "LAST ACTIVE")
    assert [(r[1], r[2]) for r in rows] == [("acme", "only"), ("globex", "s1"), ("acme", "s1")]
    # 3 steps, 2 tool runs, 0 errors, 100+200+300 prompt tokens, 0+80+160 cached, 52 output
    assert rows[0][3:] == ["-", "6.500", "3", "2", "0", "600", "40%", "52", "-", "ended (shutdown)"]
    assert out.rstrip().endswith("sessions 1-3")


def test_traces_list_filters_and_pages(store, capsys):
    assert _run(["traces", "list", "--tenant", "acme", "--limit", "1", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert [r[2] for r in _table_rows(out, "LAST ACTIVE")] == ["only"]
    assert "more with --offset 1" in out
    assert _run(["traces", "list", "--tenant", "acme", "--limit", "1", "--offset", "1", "--json",
                 "--db", str(store)]) == 0
    page = json.loads(capsys.readouterr().out)
    assert [s["session"] for s in page["data"]] == ["s1"] and page["has_more"] is False
    assert _run(["traces", "list", "--since", "2099-01-01", "--db", str(store)]) == 0
    assert capsys.readouterr().out.strip() == "No sessions match."
    assert _run(["traces", "list", "--errors", "--db", str(store)]) == 0
    assert capsys.readouterr().out.strip() == "No sessions match."
    assert _run(["traces", "list", "--id-contains", "nl", "--json", "--db", str(store)]) == 0
    assert [s["session"] for s in json.loads(capsys.readouterr().out)["data"]] == ["only"]


def test_traces_list_bad_arguments_are_usage_errors(store, capsys):
    assert _run(["traces", "list", "--since", "yesterday", "--db", str(store)]) == 2
    assert "give a duration such as 30m" in capsys.readouterr().err
    for flag, value in (("--limit", "0"), ("--limit", "501"), ("--offset", "-1")):
        with pytest.raises(SystemExit) as exit_info:
            _run(["traces", "list", flag, value, "--db", str(store)])
        assert exit_info.value.code == 2


def test_traces_show_prints_each_step_with_its_gap_cache_and_forecast(forecast_store, capsys):
    assert _run(["traces", "show", "fc", "--db", str(forecast_store)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("session fc   tenant acme   agent travel   ended (shutdown)")
    assert "3 steps, 2 tool runs, 0 errors; 600 prompt tokens, 240 cached (40%); 52 output tokens; " \
           "forecasts right 1/2, 0/0 of those made confident (the ones the cache acted on)" in out
    rows = _table_rows(out, "#")
    # no prompt fingerprints here (the scripted steps carry no token ids): FROM PREV is "-"
    assert rows[0] == ["0", "0.000", "start", "-", "100", "-", "0", "0%", "100.0", "20", "tiny", "w1",
                       "get_weather", "-", "-", "-"]
    # the forecast made after step 0 (get_weather, 62 %) was right; after step 1 it was wrong
    assert rows[1][:13] == ["1", "2.500", "tool:get_weather", "2.000", "200", "-", "80", "40%", "100.0", "20",
                            "tiny", "w1", "book_table"]
    assert rows[1][13:15] == ["get_weather (62%), not confident", "get_weather (hit)"]
    assert rows[2][13:15] == ["get_weather (62%), not confident", "book_table (miss)"]
    assert "conversation" not in out


def test_traces_show_content_prints_the_conversation_once(forecast_store, store, capsys):
    assert _run(["traces", "show", "fc", "--content", "--db", str(forecast_store)]) == 0
    conversation = capsys.readouterr().out.split("conversation (")[1].splitlines()[1:]
    assert conversation == [
        "#0 request:", "  system: You are a travel agent.", "  user: Weather in Paris, then book a table.",
        "#0 reply:", '  assistant: -> get_weather({"city": "Paris"})',
        "#1 request:", "  tool call_w1: result of get_weather",
        "#1 reply:", '  assistant: -> book_table({"where": "Paris"})',
        "#2 request:", "  tool call_b2: result of book_table",
        "#2 reply:", "  assistant: Booked. Sunny."]
    assert _run(["traces", "show", "only", "--content", "--db", str(store)]) == 0
    assert ("#0 not captured (capture_content was off: `stepahead serve --capture-content` or [tracing] "
            "capture_content = true keeps it)") in capsys.readouterr().out


def test_traces_show_json_has_every_step(forecast_store, capsys):
    assert _run(["traces", "show", "fc", "--json", "--content", "--db", str(forecast_store)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["session"]["num_steps"] == 3 and [s["index"] for s in shown["steps"]] == [0, 1, 2]
    assert shown["steps"][2]["forecast"]["is_hit"] is False
    assert shown["steps"][2]["content"]["output"]["content"] == "Booked. Sunny."


def test_traces_show_finds_one_session_or_says_why(store, capsys):
    assert _run(["traces", "show", "s1", "--db", str(store)]) == 2
    assert "exists in several tenants (acme, globex); pass --tenant" in capsys.readouterr().err
    assert _run(["traces", "show", "s1", "--tenant", "globex", "--db", str(store)]) == 0
    assert "tenant globex" in capsys.readouterr().out
    assert _run(["traces", "show", "s1", "--tenant", "initech", "--db", str(store)]) == 1
    assert "no session 's1' in tenant 'initech'" in capsys.readouterr().err
    assert _run(["traces", "show", "nope", "--db", str(store.parent / "missing.sqlite3")]) == 1
    assert "no trace store at" in capsys.readouterr().err


def test_traces_show_finds_a_session_by_the_request_id_of_one_of_its_steps(store, capsys):
    from agents_trace.step_queries import list_steps

    request_id = list_steps(store, "globex", "s1")["data"][2]["response_id"]   # a reply's x-request-id
    assert _run(["traces", "show", request_id, "--db", str(store)]) == 0
    captured = capsys.readouterr()
    assert f"request '{request_id}' is step #2 of session 's1' (tenant 'globex')" in captured.err
    assert captured.out.startswith("session s1   tenant globex") and "3 steps" in captured.out
    assert _run(["traces", "show", request_id, "--json", "--db", str(store)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["session"]["session"], shown["session"]["tenant"], len(shown["steps"])) == ("s1", "globex", 3)
    assert _run(["traces", "show", request_id, "--tenant", "acme", "--db", str(store)]) == 1   # not acme's
    assert f"no session '{request_id}' in tenant 'acme'" in capsys.readouterr().err
    assert _run(["traces", "show", request_id, "--follow", "--db", str(store)]) == 0   # ended: shown at once
    assert capsys.readouterr().out.rstrip().endswith("session 's1' ended (shutdown)")
    assert _run(["traces", "list", "--id-contains", request_id, "--json", "--db", str(store)]) == 0
    assert [(s["tenant"], s["session"]) for s in json.loads(capsys.readouterr().out)["data"]] == [("globex", "s1")]


def test_traces_show_escapes_control_characters_a_client_sent(tmp_path, capsys):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    hostile = "evil\x1b[2J\nrow"
    run_scripted_session(tracer, clock, headers={"x-session-id": hostile, "x-agent-name": "a\rb"})
    tracer.stop()
    db = str(tmp_path / "traces.sqlite3")
    assert _run(["traces", "list", "--db", db]) == 0
    listed = capsys.readouterr().out
    assert "\x1b" not in listed and "\r" not in listed and len(listed.splitlines()) == 4
    assert "evil\\x1b[2J\\nrow" in listed and "a\\rb" in listed
    assert _run(["traces", "show", hostile, "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and shown.startswith("session evil\\x1b[2J\\nrow   tenant acme   agent a\\rb")


def test_traces_export_all_writes_every_matching_session_as_one_trace(store, tmp_path, capsys):
    out = tmp_path / "all.jsonl"
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", str(out)]) == 0
    assert "9 requests of 3 sessions of 2 tenant(s) written to" in capsys.readouterr().err
    header, records = read_trace(out)
    assert header.note.startswith("stepahead: 3 sessions of 2 tenant(s)")
    assert [(r.tenant, r.session) for r in records] == \
        [("acme", "s1")] * 3 + [("globex", "s1")] * 3 + [("acme", "only")] * 3
    # one clock throughout: each scripted session takes 6.5 s and starts where the last ended
    assert [r.t for r in records] == [0.0, 2.5, 6.0, 6.5, 9.0, 12.5, 13.0, 15.5, 19.0]
    assert [r.after for r in records[:3]] == ["start", "tool:get_weather", "tool:book_table"]
    assert [r.tool_calls for r in records[:3]] == [["get_weather"], ["book_table"], []]
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]
    assert _run(["traces", "export", "--all", "--tenant", "acme", "--db", str(store)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + 6


def test_traces_export_all_merges_sessions_that_overlap_in_arrival_order(tmp_path, capsys):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    open_steps = {}
    for name, step in (("a", 0), ("b", 0), ("a", 1), ("b", 1), ("b", 2), ("a", 2)):
        messages = [{"role": "user", "content": f"task {name}"}]
        messages += [{"role": "user", "content": f"more {i}"} for i in range(step)]
        if name in open_steps:
            tracer.end(open_steps.pop(name), StepResult(num_input_tokens=10, num_output_tokens=2,
                                                        finish_reason="stop", output_text="ok"))
        open_steps[name] = tracer.begin("acme", {"x-session-id": name}, {"model": "m", "messages": messages})
        clock.advance(1.0)
    for ctx in open_steps.values():
        tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop",
                                   output_text="ok"))
    tracer.stop()
    assert _run(["traces", "export", "--all", "--db", str(tmp_path / "traces.sqlite3")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(line["session"], line["t"]) for line in lines] == \
        [("a", 0.0), ("b", 1.0), ("a", 2.0), ("b", 3.0), ("b", 4.0), ("a", 5.0)]
    assert [line["after"] for line in lines if line["session"] == "b"] == ["start", "user", "user"]


def test_traces_export_all_filters_and_says_what_is_wrong(store, tmp_path, capsys):
    assert _run(["traces", "export", "--all", "--since", "2099-01-01", "--db", str(store)]) == 1
    assert "no sessions in" in capsys.readouterr().err
    assert _run(["traces", "export", "--all", "--until", "soon", "--db", str(store)]) == 2
    assert "--until 'soon': give a duration" in capsys.readouterr().err
    assert _run(["traces", "export", "--session", "only", "--since", "1h", "--db", str(store)]) == 2
    assert "select sessions for --all" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(["traces", "export", "--all", "--session", "only", "--db", str(store)])
    missing_dir = tmp_path / "no" / "such" / "dir" / "out.jsonl"
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", str(missing_dir)]) == 2
    assert "cannot write" in capsys.readouterr().err and not missing_dir.parent.exists()


def test_traces_stats_sums_each_tenant_and_all(store, capsys):
    assert _run(["traces", "stats", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    rows = _table_rows(out, "TENANT")
    # acme: two scripted sessions (100 + 200 + 300 prompt tokens, 0 + 80 + 160 cached, tool gaps 2 s and 3 s)
    assert rows[0] == ["acme", "2", "6", "0", "4", "1200", "40%", "104", "100.0", "100.0", "2.500", "-", "-"]
    assert rows[1][:3] == ["globex", "1", "3"]
    assert rows[2][:7] == ["(all)", "3", "9", "0", "6", "1800", "40%"]   # "s1" of two tenants is two sessions
    assert "steps from" in out
    assert _run(["traces", "stats", "--tenant", "globex", "--json", "--db", str(store)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert [row["tenant"] for row in stats["tenants"]] == ["globex"] and stats["total"]["steps"] == 3
    assert (stats["total"]["tool_gap_p50_s"], stats["total"]["ttft_p99_s"]) == (2.5, 0.1)
    assert _run(["traces", "stats", "--since", "2099-01-01", "--db", str(store)]) == 0
    assert capsys.readouterr().out.strip() == "No steps in this window."


def test_traces_stats_counts_forecasts_right(forecast_store, capsys):
    assert _run(["traces", "stats", "--json", "--db", str(forecast_store)]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    assert (total["forecasts"], total["forecast_hits"], total["forecast_hit_rate"]) == (2, 1, 0.5)
    assert _run(["traces", "stats", "--db", str(forecast_store)]) == 0
    assert _table_rows(capsys.readouterr().out, "TENANT")[0][-1] == "1/2 (50%)"


def test_traces_show_and_stats_count_a_failed_step(tmp_path, capsys):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for error, message in (("rate_limit_exceeded", "Too many requests: wait 2 s"), ("client_closed", None)):
        ctx = tracer.begin("acme", {"x-session-id": "bad"}, body)
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=10, error=error, error_message=message))
    tracer.stop()
    db = str(tmp_path / "traces.sqlite3")
    assert _run(["traces", "show", "bad", "--db", db]) == 0
    rows = _table_rows(capsys.readouterr().out, "#")
    assert [(row[12], row[-1]) for row in rows] == [("error", "rate_limit_exceeded: Too many requests: wait 2 s"),
                                                   ("error", "client_closed")]
    assert _run(["traces", "list", "--errors", "--db", db]) == 0
    assert [row[2] for row in _table_rows(capsys.readouterr().out, "LAST ACTIVE")] == ["bad"]
    assert _run(["traces", "stats", "--json", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["errors"] == 2


def _stored_sessions(store) -> list[tuple[str, str, int]]:
    import sqlite3

    with sqlite3.connect(store) as db:
        return db.execute("SELECT s.tenant, s.session, (SELECT count(*) FROM steps t WHERE t.tenant = s.tenant "
                          "AND t.session = s.session) FROM sessions s ORDER BY s.tenant, s.session").fetchall()


def test_traces_delete_removes_one_session_with_its_steps_and_only_it(store, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert _run(["traces", "delete", "--session", "s1", "--tenant", "globex", "--db", str(store)]) == 2
    assert "nothing deleted (pass --yes" in capsys.readouterr().err   # not asked: no terminal
    assert len(_stored_sessions(store)) == 3
    assert _run(["traces", "delete", "--session", "s1", "--db", str(store), "--yes"]) == 2   # two tenants have it
    assert _run(["traces", "delete", "--session", "s1", "--tenant", "globex", "--db", str(store), "--yes"]) == 0
    assert "deleted session 's1' of tenant 'globex' (3 steps)" in capsys.readouterr().err
    assert _stored_sessions(store) == [("acme", "only", 3), ("acme", "s1", 3)]
    assert _run(["traces", "delete", "--session", "s1", "--tenant", "globex", "--db", str(store), "--yes"]) == 1


def test_traces_delete_all_takes_the_filters_and_asks_on_a_terminal(store, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda question: "n")
    assert _run(["traces", "delete", "--all", "--tenant", "acme", "--db", str(store)]) == 2
    assert len(_stored_sessions(store)) == 3
    monkeypatch.setattr("builtins.input", lambda question: "y")
    assert _run(["traces", "delete", "--all", "--tenant", "acme", "--db", str(store)]) == 0
    assert "deleted 2 sessions of 1 tenant(s) (6 steps)" in capsys.readouterr().err
    assert _stored_sessions(store) == [("globex", "s1", 3)]
    assert _run(["traces", "delete", "--session", "s1", "--agent", "x", "--db", str(store), "--yes"]) == 2
    assert _run(["traces", "delete", "--all", "--tenant", "nobody", "--db", str(store), "--yes"]) == 1


def test_show_follow_refuses_json_and_asks_for_the_tenant_of_an_ambiguous_id(store, capsys):
    with pytest.raises(SystemExit):
        _run(["traces", "show", "s1", "--follow", "--json", "--db", str(store)])
    assert _run(["traces", "show", "s1", "--follow", "--db", str(store)]) == 2
    assert "--tenant" in capsys.readouterr().err
    # an ended session: shown, then said to have ended, at once
    assert _run(["traces", "show", "only", "--follow", "--db", str(store)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("session 'only' ended (shutdown)")


@pytest.fixture
def header_id_store(tmp_path):
    """acme's "job 100%" and "café" (their answers' `x-session-id`: `job 100%25`,
    `caf%C3%A9`), "a%41" beside "aA" (what "a%41" decodes to); globex's "theirs 5%"."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for tenant, session in (("acme", "job 100%"), ("acme", "café"), ("acme", "a%41"), ("acme", "aA"),
                            ("globex", "theirs 5%")):
        run_scripted_session(tracer, clock, tenant=tenant, headers={"x-session-id": encode_header_id(session)})
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def _shown(argv: list[str], capsys) -> tuple[str, str]:
    assert _run(argv + ["--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    return shown["session"]["tenant"], shown["session"]["session"]


def test_traces_commands_take_an_answers_percent_encoded_session_header(header_id_store, capsys):
    """`show`, `show --follow`, `list --id-contains`, `export` and `delete` take the
    `x-session-id` an answer carries: the id as given first, else percent-decoded, and
    only within `--tenant`."""
    db = ["--db", str(header_id_store)]
    assert _shown(["traces", "show", "job 100%25", *db], capsys) == ("acme", "job 100%")
    assert _shown(["traces", "show", "caf%C3%A9", "--tenant", "acme", *db], capsys) == ("acme", "café")
    assert _shown(["traces", "show", "a%41", *db], capsys) == ("acme", "a%41")   # as given first
    assert _run(["traces", "show", "theirs 5%25", "--tenant", "acme", *db]) == 1   # globex's
    assert "no session 'theirs 5%25' in tenant 'acme'" in capsys.readouterr().err
    assert _shown(["traces", "show", "theirs 5%25", *db], capsys) == ("globex", "theirs 5%")
    for text, expected in (("job 100%25", [("acme", "job 100%")]), ("f%C3%A9", [("acme", "café")]),
                           ("%41", [("acme", "a%41"), ("acme", "aA")]), ("5%25", [("globex", "theirs 5%")])):
        assert _run(["traces", "list", "--id-contains", text, "--json", *db]) == 0
        assert sorted((s["tenant"], s["session"]) for s in json.loads(capsys.readouterr().out)["data"]) == expected
    assert _run(["traces", "list", "--id-contains", "5%25", "--tenant", "acme", "--json", *db]) == 0
    assert json.loads(capsys.readouterr().out)["data"] == []
    assert _run(["traces", "show", "caf%C3%A9", "--follow", *db]) == 0   # ended: shown at once
    assert capsys.readouterr().out.rstrip().endswith("session 'café' ended (shutdown)")
    assert _run(["traces", "export", "--session", "caf%C3%A9", *db]) == 0
    assert {json.loads(line).get("session") for line in capsys.readouterr().out.splitlines()[1:]} == {"café"}
    assert _run(["traces", "delete", "--session", "job 100%25", "--yes", *db]) == 0
    assert "deleted session 'job 100%' of tenant 'acme' (3 steps)" in capsys.readouterr().err
    assert ("acme", "job 100%", 3) not in _stored_sessions(header_id_store)
    assert len(_stored_sessions(header_id_store)) == 4


PIPED_COMMANDS = (["stats", "--json"], ["list"], ["list", "--json"], ["show", "only"], ["show", "only", "--json"],
                  ["show", "only", "--follow"],
                  ["export", "--session", "only"], ["export", "--all"])


def _cli(argv: list[str]) -> list[str]:
    """The command line of `stepahead` in a process of its own."""
    return [sys.executable, "-m", "gateway.cli", *argv]


def _env(*, buffered: bool) -> dict[str, str]:
    """This environment, with stdout block-buffered (as by default) or not."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize("command", PIPED_COMMANDS, ids=" ".join)
def test_traces_command_into_a_closed_pipe_exits_141_without_a_traceback(store, command, buffered):
    """`... | head` where head has gone: no BrokenPipeError traceback, and (buffered) no
    "Exception ignored" at exit either."""
    read_end, write_end = os.pipe()
    os.close(read_end)   # the reader is gone before the first write
    try:
        done = subprocess.run(_cli(["traces", *command, "--db", str(store)]), stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=_env(buffered=buffered))
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_traces_export_read_in_part_then_closed_exits_quietly(tmp_path):
    """`stepahead traces export ... | head -c 300`: the reader closes mid-stream."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    run_scripted_session(tracer, clock, headers={"x-session-id": "big"}, user_text="x" * 200_000)
    tracer.stop()
    with subprocess.Popen(_cli(["traces", "export", "--session", "big", "--db", str(tmp_path / "traces.sqlite3")]),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(buffered=True)) as process:
        head = process.stdout.read(300)   # far less than the ~600 kB it writes, past any pipe buffer
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(timeout=120) == 141
    assert head.startswith(b'{"format":"stepahead-trace/1"') and len(head) == 300
    assert stderr == b""
