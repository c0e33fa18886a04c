"""Known answers for the terminal trace views' pieces: `--since` (time_points), and what a step asked for."""
import json
from datetime import datetime

import pytest

from agents_trace.time_points import parse_time_point
from agents_trace.content_rows import capped_entries_json
from agents_trace.traces_view import asked_for, step_conversation

NOW_S = 1_800_000_000.0


@pytest.mark.parametrize("text, back_s", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600),
                                          (" 7d ", 604800)])
def test_since_takes_a_duration_back_from_now(text, back_s):
    assert parse_time_point(text, NOW_S) == NOW_S - back_s


def test_since_takes_a_local_date_or_date_time():
    assert parse_time_point("2026-12-01", NOW_S) == datetime(2026, 12, 1).timestamp()
    assert parse_time_point("2026-12-01T14:30", NOW_S) == datetime(2026, 12, 1, 14, 30).timestamp()


@pytest.mark.parametrize("text", ["yesterday", "30", "2w", "-5m", ""])
def test_since_refuses_anything_else_with_the_forms_it_takes(text):
    with pytest.raises(ValueError, match="30m, 2h or 7d"):
        parse_time_point(text, NOW_S)


def _step(tool_names=(), other=(), error=None):
    return {"error": error, "tool_calls": [{"name": n} for n in tool_names],
            "other_choices": [{"tool_calls": [{"name": n} for n in names]} for names in other]}


def test_asked_for_names_tools_text_answers_and_numbered_choices():
    assert asked_for(_step(("search", "fetch"))) == "search, fetch"
    assert asked_for(_step()) == "text answer"
    assert asked_for(_step(("search",), other=((), ("fetch",)))) == "#0 search; #1 text answer; #2 fetch"
    assert asked_for(_step(("search",), error="timeout")) == "error"


def test_counts_in_the_session_summary_agree_with_their_number():
    from agents_trace.text_table import counted

    assert [counted(n, "tool run") for n in (0, 1, 2)] == ["0 tool runs", "1 tool run", "2 tool runs"]


def test_a_cache_hit_share_rounds_halves_up_as_the_ui_does():
    """16 of 128 cached is 12.5%: "13%", as /ui's Hit column shows it (dom.js `pct`)."""
    from agents_trace.traces_view import _share

    assert [_share(16, 128), _share(1, 8), _share(3, 8), _share(29, 200), _share(1, 3), _share(0, 0)] == \
        ["13%", "13%", "38%", "15%", "33%", None]
    from agents_trace.traces_view import _percent   # a forecast's probability, as /ui's `percent`
    assert [_percent(0.125), _percent(0.625), _percent(0.3)] == ["13%", "63%", "30%"]


def test_a_cut_request_shows_how_much_was_cut_and_how_it_began_whole():
    """QA181 F2: the text view of the entry that says a refused request was cut gives its
    counts (as the JSON does) and the start of the cut JSON whole, an ellipsis where it stops."""
    entries = [{"role": "system", "content": "sys"}] + [{"role": "user", "content": f"m{i} " + "y" * 30}
                                                         for i in range(6)]
    content = {"new_messages": json.loads(capped_entries_json(entries, 120)), "output": None}
    marker = content["new_messages"][-1]
    assert marker["content"].startswith('{"role": "us') and marker["num_entries"] == 5
    lines, _ = step_conversation({"index": 0}, content, None)
    assert lines[-4:] == [f"  truncated: 5 entries cut, {marker['num_chars']:,} characters of JSON; they began:",
                          "             " + marker["content"] + " …", "#0 reply:", "  -"]


def _session(session_id: str) -> dict:
    return {"session": session_id, "tenant": "acme", "agent": None, "is_open": False, "ended_s": 2.0,
            "end_reason": "idle", "started_s": 1.0, "last_s": 2.0, "duration_s": 1.0, "num_steps": 1,
            "num_tool_runs": 0, "num_errors": 0, "num_input_tokens": 10, "num_cached_tokens": 0,
            "num_output_tokens": 2, "num_forecasts": 0}


def test_a_session_whose_id_is_shown_escaped_says_what_to_paste_and_a_backslash_one_does_not():
    """QA194 F3: an id holding a tab and one holding a backslash and a `t` both read
    `tab\\there`; only the first gets the text that names it alone (as /ui's page)."""
    from agents_trace.traces_view import _summary

    tab, backslash = _summary(_session("tab\there")), _summary(_session("tab\\there"))
    assert tab[0].startswith("session tab\\there   tenant acme") and backslash[0].startswith("session tab\\there ")
    assert tab[1] == "(its id holds characters shown escaped; to name it, paste tab%09here)"
    assert not backslash[1].startswith("(its id")
    assert _summary(_session("caf\u00e9\u202e"))[1].endswith("paste caf%C3%A9%E2%80%AE)")


def test_asked_for_spells_a_tool_named_as_a_control_step_as_the_forecasts_do():
    """QA218 F8: a tool named END, USER or ASSISTANT_TEXT (or `tool:x`, `<x>`) is `tool:NAME`
    in ASKED FOR, as in FORECAST/ACTUAL, so `END` never reads as the session's end."""
    assert asked_for(_step(("END", "USER", "ASSISTANT_TEXT", "search"))) == \
        "tool:END, tool:USER, tool:ASSISTANT_TEXT, search"
    assert asked_for(_step(("tool:x",), other=(("<oov>",),))) == "#0 tool:tool:x; #1 tool:<oov>"


def test_a_refused_step_has_no_cache_hit_share():
    """QA218 F6: a refused step (failed having generated nothing) was never served: its
    CACHED % is none ("—"), not "0%"; a step cut after generating keeps its share."""
    from agents_trace.traces_view import _step_hit

    refused = {"error": "context_length_exceeded", "num_output_tokens": 0, "num_input_tokens": 45_019,
               "num_cached_tokens": 0}
    assert _step_hit(refused) is None
    assert _step_hit({**refused, "error": "client_closed", "num_output_tokens": 4, "num_cached_tokens": 9_000}) == "20%"
    assert _step_hit({**refused, "error": None, "num_output_tokens": 3}) == "0%"
