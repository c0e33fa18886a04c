"""`stepahead traces export` reads the store directly and writes stepahead-trace/1."""
from __future__ import annotations

import argparse
import json

import pytest

from agents_trace.traces_command import register

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
                              (tmp_path, 1, "no trace store at"),
                              (not_a_db, 2, "cannot read the trace store")):
        assert _run(["traces", "export", "--session", "only", "--db", str(db)]) == code
        assert message in capsys.readouterr().err
    assert _run(["traces", "export", "--session", "only", "--db", str(store), "--output", str(tmp_path)]) == 2
    assert "cannot write" in capsys.readouterr().err
