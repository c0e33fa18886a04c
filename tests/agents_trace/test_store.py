"""The SQLite trace store: summaries, steps, content, retention, restarts, export."""
from __future__ import annotations

import json

import pytest

from agents_trace.export import FORMAT, export_lines, in_chunks
from agents_trace.store import TraceStore
from agents_trace.header_ids import encode_header_id
from agents_trace.store_queries import SessionFilter, find_request, find_session, find_session_as_given, \
    given_id_forms, list_sessions
from agents_trace.step_queries import list_steps, step_content

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session


@pytest.fixture
def clock():
    return ManualClock()


def test_store_keeps_session_summary_and_steps(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        contexts = run_scripted_session(tracer, clock, headers={"x-agent-name": "travel"})
        assert tracer.flush(5.0)
        session = contexts[0].session
        [found] = find_session(tracer.store_path, session, "acme")
        assert (found["num_steps"], found["num_tool_runs"], found["agent"]) == (3, 2, "travel")
        assert (found["num_input_tokens"], found["num_cached_tokens"]) == (600, 240)
        assert found["is_open"] is True and found["trace_id"]
        assert not [column for column in found if column.startswith("span_")]   # the writers' bookkeeping
        assert find_session(tracer.store_path, session, "globex") == []
        steps = list_steps(tracer.store_path, "acme", session)["data"]
        assert [s["after_label"] for s in steps] == ["start", "tool:get_weather",
                                                     "tool:book_table"]
        assert [s["gap_s"] for s in steps][1:] == pytest.approx([2.0, 3.0])
        assert steps[0]["tool_calls"][0]["name"] == "get_weather"
        assert steps[2]["tool_calls"] == [] and steps[2]["finish_reason"] == "stop"
        assert step_content(tracer.store_path, "acme", session, 0) is None
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
        assert find_session(tracer.store_path, session, None)[0]["is_open"] is False
    finally:
        tracer.stop()


def test_store_lists_with_filters_and_pages(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        for i in range(5):
            run_scripted_session(tracer, clock, headers={"x-session-id": f"s{i}",
                                                         "x-agent-name": "even" if i % 2 == 0
                                                         else "odd"})
        assert tracer.flush(5.0)
        path = tracer.store_path
        page = list_sessions(path, SessionFilter(tenant="acme"), limit=2)
        assert [s["session"] for s in page["data"]] == ["s4", "s3"] and page["has_more"]
        rest = list_sessions(path, SessionFilter(tenant="acme"), limit=10, offset=2)
        assert [s["session"] for s in rest["data"]] == ["s2", "s1", "s0"] and not rest["has_more"]
        odd = list_sessions(path, SessionFilter(tenant="acme", agent="odd"))
        assert {s["session"] for s in odd["data"]} == {"s1", "s3"}
        assert list_sessions(path, SessionFilter(tenant="acme", errors_only=True))["data"] == []
        assert list_sessions(path, SessionFilter(tenant="other"))["data"] == []
        late = list_sessions(path, SessionFilter(since_s=clock.now_s - 6.0))
        assert [s["session"] for s in late["data"]] == ["s4"]
    finally:
        tracer.stop()


def test_store_lists_the_sessions_after_a_key_in_the_lists_order_ties_included(tmp_path, clock):
    """`after` (last_s, tenant, session): the rows after that key in the list's order, where
    sessions active at the same second follow by tenant, then id; a tenant filter holds."""
    import sqlite3

    tracer, _ = make_tracer(tmp_path, clock)
    try:
        for tenant, session in (("acme", "b"), ("globex", "a"), ("acme", "a"), ("acme", "c"), ("acme", "old")):
            run_scripted_session(tracer, clock, tenant=tenant, headers={"x-session-id": session})
        assert tracer.flush(5.0)
        path = tracer.store_path
        with sqlite3.connect(path) as db:   # four active at the same second, one before
            db.execute("UPDATE sessions SET last_s = CASE session WHEN 'old' THEN 5.0 ELSE 9.0 END")
        order = [("acme", "a"), ("acme", "b"), ("acme", "c"), ("globex", "a"), ("acme", "old")]
        every = list_sessions(path, SessionFilter())["data"]
        assert [(s["tenant"], s["session"]) for s in every] == order
        for i, row in enumerate(every):
            key = (row["last_s"], row["tenant"], row["session"])
            after = list_sessions(path, SessionFilter(), after=key)["data"]
            assert [(s["tenant"], s["session"]) for s in after] == order[i + 1:]
            mine = list_sessions(path, SessionFilter(tenant="acme"), after=key)["data"]
            assert [(s["tenant"], s["session"]) for s in mine] == [k for k in order[i + 1:] if k[0] == "acme"]
        page = list_sessions(path, SessionFilter(), limit=1, offset=1, after=(9.0, "acme", "a"))
        assert [s["session"] for s in page["data"]] == ["c"] and page["has_more"]   # offset counts from the key
        assert list_sessions(path, SessionFilter(), after=(9.0, "zzz", ""))["data"][0]["session"] == "old"
    finally:
        tracer.stop()


def test_store_retention_drops_old_sessions_then_oldest_by_size(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(30):
            run_scripted_session(tracer, clock, headers={"x-session-id": f"s{i:02d}"},
                                 user_text="x" * 4000)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    store = TraceStore(tmp_path / "traces.sqlite3", max_age_s=3600.0, max_bytes=10**9)
    store.open()
    try:
        assert store.apply_retention(clock.now_s + 3600.0 - 60.0) > 0
        left = list_sessions(store.path, SessionFilter(), limit=100)["data"]
        assert 0 < len(left) < 30 and min(s["session"] for s in left) > "s00"
        store.max_age_s = 10**9
        store.max_bytes = store.used_bytes() * 3 // 4   # (a tiny store: its fixed pages, indexes included, are a large share)
        assert store.apply_retention(clock.now_s) > 0
        assert store.used_bytes() <= store.max_bytes
        newest = list_sessions(store.path, SessionFilter(), limit=1)["data"][0]["session"]
        assert newest == "s29"
    finally:
        store.close()


def test_store_shifts_indexes_of_a_session_resumed_after_restart(tmp_path, clock):
    for _ in range(2):
        tracer, _ = make_tracer(tmp_path, clock)
        try:
            run_scripted_session(tracer, clock, headers={"x-session-id": "kept"})
            assert tracer.flush(5.0)
        finally:
            tracer.stop()
    steps = list_steps(tmp_path / "traces.sqlite3", "acme", "kept")["data"]
    assert [s["index"] for s in steps] == [0, 1, 2, 3, 4, 5]


def test_export_writes_trace_format_with_whole_messages(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        contexts = run_scripted_session(tracer, clock)
        assert tracer.flush(5.0)
        lines = [json.loads(line) for line in
                 export_lines(tracer.store_path, "acme", contexts[0].session)]
    finally:
        tracer.stop()
    assert lines[0]["format"] == FORMAT
    steps = lines[1:]
    assert [s["after"] for s in steps] == ["start", "tool:get_weather", "tool:book_table"]
    assert [s["tool_calls"] for s in steps] == [["get_weather"], ["book_table"], []]
    assert [s["t"] for s in steps] == pytest.approx([0.0, 2.5, 6.0])
    assert [s["input_tokens"] for s in steps] == [100, 200, 300]
    assert [len(s["messages"]) for s in steps] == [2, 4, 6]
    assert steps[2]["messages"][2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert steps[2]["messages"][5] == {"role": "tool", "tool_call_id": "call_b2",
                                       "content": "result of book_table"}
    assert all(s["session"] == contexts[0].session and s["tenant"] == "acme" for s in steps)


@pytest.mark.parametrize("capture", [False, True])
def test_store_keeps_every_choice_of_a_step_and_their_text_only_when_captured(tmp_path, clock, capture):
    from agents_trace.records import ChoiceOutput, StepResult, ToolCall

    tracer, exporter = make_tracer(tmp_path, clock, capture_content=capture)
    try:
        ctx = tracer.begin("acme", {"x-session-id": "n3"}, {"model": "tiny", "n": 3, "messages": [
            {"role": "user", "content": "Weather?"}]})
        tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=30, finish_reason="stop",
                                   output_text="Sunny.", other_choices=(
                                       ChoiceOutput("tool_calls", (ToolCall("c1", "get_weather", '{"city": "Oslo"}'),)),
                                       ChoiceOutput("length", (), "Probably sun"))))
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
        [step] = list_steps(tracer.store_path, "acme", "n3")["data"]
        assert step["other_choices"] == [   # a call's arguments are content too (QA149 F2)
            {"finish_reason": "tool_calls", "tool_calls": [
                {"call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}' if capture else ""}]},
            {"finish_reason": "length", "tool_calls": []}]
        [chat] = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
        assert list(chat.attributes["gen_ai.response.finish_reasons"]) == ["stop", "tool_calls", "length"]
        content = step_content(tracer.store_path, "acme", "n3", 0)
        stored = (tmp_path / "traces.sqlite3").read_bytes()
        if not capture:
            assert content is None and b"Probably sun" not in stored
            assert "gen_ai.output.messages" not in chat.attributes
            return
        assert content["output"]["content"] == "Sunny."
        assert [o.get("content") for o in content["other_outputs"]] == [None, "Probably sun"]
        assert content["other_outputs"][0]["tool_calls"][0]["function"]["name"] == "get_weather"
        messages = json.loads(chat.attributes["gen_ai.output.messages"])
        assert [m["finish_reason"] for m in messages] == ["stop", "tool_calls", "length"]
        assert messages[1]["parts"][0] == {"type": "tool_call", "id": "c1", "name": "get_weather",
                                           "arguments": {"city": "Oslo"}}
        assert messages[2]["parts"] == [{"type": "text", "content": "Probably sun"}]
    finally:
        tracer.stop()


def test_a_session_is_found_by_the_request_id_of_any_of_its_steps_within_its_tenant(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        run_scripted_session(tracer, clock, headers={"x-session-id": "trip"})
        run_scripted_session(tracer, clock, tenant="globex", headers={"x-session-id": "other"})
        assert tracer.flush(5.0)
        path = tracer.store_path
        ids = [step["response_id"] for step in list_steps(path, "acme", "trip")["data"]]
        assert len(set(ids)) == 3 and all(i.startswith("chatcmpl-") for i in ids)
        for index, request_id in enumerate(ids):
            [(session, step)] = find_request(path, request_id, "acme")
            assert (session["session"], session["tenant"], step) == ("trip", "acme", index)
            assert session["num_steps"] == 3 and "request_step" not in session
            assert find_request(path, request_id, "globex") == []   # another tenant's request: none
            listed = list_sessions(path, SessionFilter(id_contains=request_id))["data"]
            assert [s["session"] for s in listed] == ["trip"]
            assert list_sessions(path, SessionFilter(tenant="globex", id_contains=request_id))["data"] == []
        assert find_request(path, ids[0][:-1], None) == []   # a request id is matched whole
        assert list_sessions(path, SessionFilter(id_contains=ids[0][:-1]))["data"] == []
        assert [s["session"] for s in list_sessions(path, SessionFilter(id_contains="ri"))["data"]] == ["trip"]
        import sqlite3
        plan = " ".join(str(row[-1]) for row in sqlite3.connect(path).execute(
            "EXPLAIN QUERY PLAN SELECT tenant, session FROM steps WHERE response_id = ?", (ids[0],)))
        assert "steps_by_response_id" in plan   # a lookup, not a scan of every step
    finally:
        tracer.stop()


def test_a_session_id_given_as_an_answers_percent_encoded_header_is_found_within_its_tenant(tmp_path, clock):
    """`find_session_as_given` and `id_contains`: the text as given, else (or, for
    `id_contains`, also) percent-decoded, never past the tenant asked for."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        for tenant, session in (("acme", "job 100%"), ("acme", "a%41"), ("acme", "aA"), ("globex", "café")):
            run_scripted_session(tracer, clock, tenant=tenant, headers={"x-session-id": encode_header_id(session)})
        assert tracer.flush(5.0)
        path = tracer.store_path

        def given(text: str, tenant: str | None) -> list[tuple[str, str]]:
            return [(s["tenant"], s["session"]) for s in find_session_as_given(path, text, tenant)]

        def listed(text: str, tenant: str | None) -> list[tuple[str, str]]:
            page = list_sessions(path, SessionFilter(tenant=tenant, id_contains=text))["data"]
            return sorted((s["tenant"], s["session"]) for s in page)

        assert given_id_forms("job 100%25") == ("job 100%25", "job 100%")
        assert given_id_forms("job 100%") == ("job 100%",) and given_id_forms("%FF") == ("%FF",)
        assert given("job 100%25", "acme") == [("acme", "job 100%")] and find_session(path, "job 100%25", "acme") == []
        assert given("a%41", "acme") == [("acme", "a%41")]   # as given first
        assert given("caf%C3%A9", None) == [("globex", "café")] and given("caf%C3%A9", "acme") == []
        assert listed("100%25", "acme") == [("acme", "job 100%")]
        assert listed("%41", None) == [("acme", "a%41"), ("acme", "aA")]
        assert listed("f%C3%A9", None) == [("globex", "café")] and listed("f%C3%A9", "acme") == []
    finally:
        tracer.stop()


def test_store_written_by_version_1_gains_the_new_columns(tmp_path, clock):
    """A store from before choices were kept: old rows read as one choice, new rows keep all."""
    import sqlite3

    from agents_trace.store_schema import SCHEMA, connect_writer

    path = tmp_path / "traces.sqlite3"
    old_schema = SCHEMA.replace(", other_choices TEXT NOT NULL DEFAULT '[]'", "").replace(
        ", other_outputs TEXT NOT NULL DEFAULT '[]'", "").replace(
        "    num_confident_forecasts INTEGER NOT NULL DEFAULT 0,\n", "").replace(
        "    num_confident_forecast_hits INTEGER NOT NULL DEFAULT 0,\n", "").replace(
        "    prompt_blocks TEXT, service_tier TEXT,\n", "").replace("    gateway_started_s REAL,\n", "")
    assert "other_" not in old_schema and "confident" not in old_schema and "service_tier" not in old_schema
    assert "gateway_started_s" not in old_schema
    db = sqlite3.connect(path)
    db.executescript(old_schema)
    db.execute("INSERT INTO steps (tenant, session, idx, operation, model, session_source, arrived_s, ended_s, "
               "after_kind, after_label, after_tools, num_messages, is_stream, num_input_tokens, "
               "num_cached_tokens, num_output_tokens, tool_calls) "
               "VALUES ('acme', 'old', 0, 'chat', 'tiny', 'header', 1, 2, 'start', 'start', '[]', 1, 0, 5, 0, 1, '[]'), "
               "('acme', 'old', 1, 'chat', 'tiny', 'header', 3, 4, 'user', 'user', '[]', 3, 0, 9, 0, 1, '[]')")
    db.execute("INSERT INTO sessions (tenant, session, source, started_s, last_s, num_steps, num_forecasts) "
               "VALUES ('acme', 'old', 'header', 1, 2, 1, 1)")
    db.commit()
    db.close()
    old = list_steps(path, "acme", "old")["data"][0]   # not yet upgraded
    assert (old["other_choices"], old["prefix_from_previous_tokens"], old["service_tier"]) == ([], None, None)
    [second] = list_steps(path, "acme", "old", offset=1)["data"]   # a page after the first: no fingerprints to compare
    assert (second["index"], second["prefix_from_previous_tokens"]) == (1, None)
    [session] = find_session(path, "old", "acme")
    assert (session["num_forecasts"], session["num_confident_forecasts"]) == (1, 0)
    connect_writer(path).close()
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(steps)")}
    assert {"other_choices", "prompt_blocks", "service_tier", "gateway_started_s"} <= columns
    assert list_steps(path, "acme", "old")["data"][0]["other_choices"] == []
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(sessions)")}
    assert {"num_confident_forecasts", "num_confident_forecast_hits"} <= columns
    assert find_session(path, "old", "acme")[0]["num_confident_forecast_hits"] == 0


def test_session_counts_forecasts_made_confident_apart(tmp_path, clock):
    """Step 1's forecast (confident) is right, step 2's (not confident) is wrong: the
    session shows 1/2 right, and 1/1 of those made confident."""
    from cache.forecast import Forecast

    tracer, _ = make_tracer(tmp_path, clock)
    made = iter([("get_weather", True), ("search", False)])

    def forecaster(tenant, session, now_s):
        name, confident = next(made)
        return Forecast(tenant, session, now_s, next_step={name: 0.9, "END": 0.1}, confident=confident)

    tracer.set_forecaster(forecaster)
    try:
        run_scripted_session(tracer, clock, headers={"x-session-id": "f"})
        assert tracer.flush(5.0)
        [found] = find_session(tracer.store_path, "f", "acme")
        assert (found["num_forecasts"], found["num_forecast_hits"]) == (2, 1)
        assert (found["num_confident_forecasts"], found["num_confident_forecast_hits"]) == (1, 1)
        listed = list_sessions(tracer.store_path, SessionFilter(tenant="acme"))["data"][0]
        assert listed["num_confident_forecasts"] == 1
    finally:
        tracer.stop()


def test_export_gives_the_tool_calls_of_the_choice_the_session_went_on_from(tmp_path, clock):
    """n = 2: choice 0 answers in text, choice 1 calls get_weather; the agent runs choice 1's
    call, so the exported step asks for get_weather, agreeing with the next step's `after`."""
    from agents_trace.records import ChoiceOutput, StepResult, ToolCall

    tracer, _ = make_tracer(tmp_path, clock)
    headers = {"x-session-id": "kept"}
    user = {"role": "user", "content": "Weather?"}
    try:
        ctx = tracer.begin("acme", headers, {"model": "tiny", "n": 2, "messages": [user]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=5, finish_reason="stop",
                                   output_text="Sunny.", other_choices=(
                                       ChoiceOutput("tool_calls", (ToolCall("c1", "get_weather", "{}"),)),)))
        clock.advance(2.0)
        ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": [
            user, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=20, num_output_tokens=5, finish_reason="stop",
                                   output_text="It is sunny."))
        assert tracer.flush(5.0)
        steps = [json.loads(line) for line in export_lines(tracer.store_path, "acme", "kept")][1:]
    finally:
        tracer.stop()
    assert [s["after"] for s in steps] == ["start", "tool:get_weather"]
    assert [s["tool_calls"] for s in steps] == [["get_weather"], []]


def test_kept_tool_names_known_answers():
    from agents_trace.export import kept_tool_names

    def call(call_id, name):
        return {"call_id": call_id, "name": name}
    step = {"tool_calls": [call("a", "search")], "other_choices": [
        {"tool_calls": []}, {"tool_calls": [call("b", "book"), call("c", "pay")]}]}
    assert kept_tool_names(step, {"after_tools": [call("c", "pay")]}) == ["book", "pay"]
    assert kept_tool_names(step, {"after_tools": []}) == []          # a user turn: the text answer
    assert kept_tool_names(step, None) == ["search"]                 # the last step: choice 0
    assert kept_tool_names(step, {"after_tools": [call("z", "x")]}) == ["search"]
    assert kept_tool_names({"tool_calls": [call("a", "search")], "other_choices": []},
                           {"after_tools": []}) == ["search"]        # one choice: as recorded


def test_export_pieces_hold_whole_lines_and_lose_none():
    lines = [f'{{"n":{n}}}\n' for n in range(1000)]
    pieces = list(in_chunks(lines, size=100))
    assert "".join(pieces) == "".join(lines)
    assert all(piece.endswith("\n") and len(piece) < 100 + 12 for piece in pieces)
    assert all(len(piece) >= 100 for piece in pieces[:-1])   # one hop per ~100 characters, not per line
    assert list(in_chunks([])) == [] and list(in_chunks(["a\n"])) == ["a\n"]


def _stored_then_damaged(tmp_path, clock, table: str | None = None):
    """A store holding one scripted session, closed, then damaged past its header (or
    only `table`'s first page)."""
    from tests.cache.test_damaged_files import damage_pages

    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, user_text="before the damage")
    tracer.stop()
    damage_pages(tracer.store_path, table)
    return tracer.store_path


def test_a_store_found_damaged_is_set_aside_and_the_steps_go_to_a_new_one(tmp_path, clock, caplog):
    path = _stored_then_damaged(tmp_path, clock)
    damaged_bytes = path.read_bytes()
    tracer, _ = make_tracer(tmp_path, clock)   # the header is whole: it opens
    try:
        with caplog.at_level("WARNING", logger="stepahead"):
            contexts = run_scripted_session(tracer, clock, user_text="after the damage")
            assert tracer.flush(5.0)
        [found] = find_session(path, contexts[0].session, "acme")
        assert found["num_steps"] == 3   # every step kept, none lost to the damage
        assert tracer.stats.num_store_errors == 0 and tracer.num_stores_set_aside == 1
    finally:
        tracer.stop()
    [aside] = tmp_path.glob("traces.sqlite3.damaged-*[0-9]Z")
    assert aside.read_bytes() == damaged_bytes   # set aside as it was, never deleted
    assert f"the trace store {path} is damaged (database disk image is malformed); moved it to {aside}" \
        in caplog.text


def test_damage_a_reader_reports_is_checked_by_the_writer_and_the_store_set_aside(tmp_path, clock):
    import sqlite3

    import agents_trace.writer

    path = _stored_then_damaged(tmp_path, clock, table="sessions")
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        assert tracer.flush(5.0) and list(tmp_path.glob("*.damaged-*")) == []   # opened; nothing written yet
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            list_sessions(path, SessionFilter(tenant="acme"))
        tracer.report_store_damage()
        assert tracer.flush(5.0)
        assert len(list(tmp_path.glob("traces.sqlite3.damaged-*[0-9]Z"))) == 1
        assert list_sessions(path, SessionFilter(tenant="acme"))["data"] == []   # a new, whole store
        tracer.report_store_damage()   # again within the minute: not checked again
        assert tracer.flush(5.0)
        assert tracer._writer._next_damage_check_s > agents_trace.writer.time.monotonic() + 50
    finally:
        tracer.stop()


def test_a_store_whose_path_holds_uri_characters_is_read_where_it_is(tmp_path, clock):
    odd = tmp_path / "runs #1 ?x %41"   # each once named another file in the reader's URI
    odd.mkdir()
    tracer, _ = make_tracer(odd, clock)
    try:
        session = run_scripted_session(tracer, clock)[0].session
        assert tracer.flush(5.0)
        [found] = find_session(tracer.store_path, session, "acme")
        assert found["num_steps"] == 3
    finally:
        tracer.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs #1 ?x %41"]   # no stray file cut at # or ?


def test_a_store_on_a_read_only_mount_is_read(tmp_path, clock):
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file system needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        tracer, _ = make_tracer(mount, clock)
        try:
            session = run_scripted_session(tracer, clock)[0].session
            assert tracer.flush(5.0)
        finally:
            tracer.stop()
        assert subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True).returncode == 0
        [found] = find_session(mount / "traces.sqlite3", session, "acme")   # SQLite cannot make its -shm here
        assert found["num_steps"] == 3
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_deleting_sessions_and_retention_give_every_free_page_back(tmp_path, clock):
    """QA135: `PRAGMA incremental_vacuum` through `execute` frees one page, so deleting
    every session (and retention) left the pages free inside the file, which never shrank."""
    import sqlite3

    from agents_trace.store_delete import delete_sessions

    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(20):
            run_scripted_session(tracer, clock, headers={"x-session-id": f"s{i:02d}"}, user_text="x" * 4000)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    path = tmp_path / "traces.sqlite3"

    def num_free_pages() -> int:
        with sqlite3.connect(path) as db:
            return db.execute("PRAGMA freelist_count").fetchone()[0]

    assert delete_sessions(path, [("acme", f"s{i:02d}") for i in range(10)]) == 30
    assert num_free_pages() == 0
    store = TraceStore(path, max_age_s=1.0, max_bytes=10**9)
    store.open()
    try:
        assert store.apply_retention(clock.now_s + 3600.0) == 10
        assert num_free_pages() == 0
    finally:
        store.close()
