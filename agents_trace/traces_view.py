"""The trace store's sessions and steps as terminal text: what `/ui` shows, for a shell.

`sessions_text` is the sessions list (most recently active first), `session_text` one
session: its summary, a table of its steps (the gap before each and what came before it,
prompt tokens, how many of them the previous step's prompt began with, cached tokens,
TTFT, the model and worker, what the reply asked for, the forecast made for the step against what happened) and, on request, the conversation as captured. Invariants: the
same fields and counts as `/ui` and the JSON API, every value made printable
(`text_table`), nothing cut short; times are local.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence

from agents_trace.header_ids import encode_header_id
from agents_trace.content_rows import TRUNCATED_ROLE
from agents_trace.text_table import (NO_VALUE, Column, counted, printable, printable_lines, render_table,
                                     terminal_json)
from cache.forecast import tool_step

def local_time(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


def _share(part: int, whole: int) -> str | None:
    """`part` of `whole` as a whole percent, halves rounded up (16 of 128: "13%"), in the
    same float steps as /ui's `pct` (dom.js), so both print the same number."""
    return f"{_round_half_up(100 * part / whole)}%" if whole > 0 else None


def _percent(fraction: float) -> str:
    """A probability or rate as a whole percent, as /ui's `percent` writes it."""
    return f"{_round_half_up(100 * fraction)}%"


def state_of(session: Mapping) -> str:
    """`open`, or `ended (why)`."""
    if session["is_open"]:
        return "open"
    return f"ended ({session['end_reason']})" if session.get("end_reason") else "ended"


def _forecasts_right(session: Mapping) -> str | None:
    if not session["num_forecasts"]:
        return None
    return f"{session['num_forecast_hits']}/{session['num_forecasts']}"


_SESSION_COLUMNS = (Column("LAST ACTIVE"), Column("TENANT"), Column("SESSION"), Column("AGENT"),
                    Column("DURATION S", True), Column("STEPS", True), Column("TOOL RUNS", True),
                    Column("ERRORS", True), Column("PROMPT TOKENS", True), Column("CACHED", True),
                    Column("OUTPUT TOKENS", True), Column("FORECASTS RIGHT", True), Column("STATE"))


def sessions_text(page: Mapping) -> str:
    """The sessions table of one page of `list_sessions`, and how to get the next page."""
    sessions = page["data"]
    if not sessions:
        return "No sessions match." if not page["offset"] else \
            f"No sessions past the first {page['offset']}."
    rows = [(local_time(s["last_s"]), s["tenant"], s["session"], s["agent"], _seconds(s["duration_s"]),
             s["num_steps"], s["num_tool_runs"], s["num_errors"], s["num_input_tokens"],
             _share(s["num_cached_tokens"], s["num_input_tokens"]), s["num_output_tokens"],
             _forecasts_right(s), state_of(s)) for s in sessions]
    first = page["offset"] + 1
    footer = f"sessions {first}-{page['offset'] + len(sessions)}"
    if page["has_more"]:
        footer += f"; more with --offset {page['offset'] + len(sessions)}"
    return render_table(_SESSION_COLUMNS, rows) + "\n\n" + footer


def _choice_asked(choice: Mapping) -> str:
    """Its tools, each spelled as the forecasts spell it (`tool_step`: a tool named `END`
    is `tool:END`, as /ui's `toolStep`), or a text answer."""
    return ", ".join(tool_step(c["name"]) for c in choice["tool_calls"]) or "text answer"


def _step_hit(step: Mapping) -> str | None:
    """The step's cached share of its prompt; none for a refused step (failed having
    generated nothing, /ui's `isRefused`): its prompt was never served, no cache was tried."""
    if step["error"] and not step["num_output_tokens"]:
        return None
    return _share(step["num_cached_tokens"], step["num_input_tokens"])


def asked_for(step: Mapping) -> str:
    """What the step's reply asked for: its tools, or a text answer; each choice numbered
    when there were several (`#0 get_weather; #1 text answer`), as `/ui` shows it."""
    if step["error"]:
        return "error"
    choices = [step, *step["other_choices"]]
    if len(choices) == 1:
        return _choice_asked(step)
    return "; ".join(f"#{i} {_choice_asked(c)}" for i, c in enumerate(choices))


def _forecast_cells(step: Mapping) -> tuple[str | None, str | None, str | None]:
    forecast = step["forecast"]
    if forecast is None:
        return None, None, None
    predicted = f"{forecast['predicted']} ({_percent(forecast['p_predicted'])})"
    if not forecast["is_confident"]:
        predicted += ", not confident"
    actual = f"{forecast['actual']} ({'hit' if forecast['is_hit'] else 'miss'})"
    eta = forecast.get("eta_p50_s")
    return predicted, actual, None if eta is None else _seconds(eta)


_STEP_COLUMNS = (Column("#", True), Column("AT S", True), Column("AFTER"), Column("GAP S", True),
                 Column("PROMPT", True), Column("FROM PREV", True), Column("CACHED", True), Column("CACHED %", True),
                 Column("TTFT MS", True), Column("OUTPUT", True), Column("MODEL"), Column("WORKER"),
                 Column("ASKED FOR"),
                 Column("FORECAST"), Column("ACTUAL"), Column("ETA P50 S", True), Column("ERROR"))


def _step_row(step: Mapping, started_s: float) -> tuple:
    predicted, actual, eta = _forecast_cells(step)
    error = step["error"] or ""
    if step["error"] and step["error_message"]:
        error = f"{step['error']}: {step['error_message']}"
    return (step["index"], _seconds(step["arrived_s"] - started_s), step["after_label"],
            _seconds(step["gap_s"]), step["num_input_tokens"], step.get("prefix_from_previous_tokens"),
            step["num_cached_tokens"],
            _step_hit(step),
            None if step["ttft_s"] is None else f"{step['ttft_s'] * 1000:.1f}",
            step["num_output_tokens"], step["model"], step["worker"], asked_for(step), predicted, actual, eta, error)


def _summary(session: Mapping) -> list[str]:
    forecasts = ""
    if session["num_forecasts"]:
        forecasts = (f"; forecasts right {session['num_forecast_hits']}/{session['num_forecasts']}, "
                     f"{session['num_confident_forecast_hits']}/{session['num_confident_forecasts']} "
                     "of those made confident (the ones the cache acted on)")
    pastable = []
    if not str(session["session"]).isprintable():   # shown with escapes, as an id of those very characters is
        pastable = [f"(its id holds characters shown escaped; to name it, paste {encode_header_id(session['session'])})"]
    return [
        printable(f"session {session['session']}   tenant {session['tenant']}   agent "
                  f"{session['agent'] or NO_VALUE}   {state_of(session)}"), *pastable,
        f"started {local_time(session['started_s'])}, last active {local_time(session['last_s'])} "
        f"({_seconds(session['duration_s'])} s)",
        f"{counted(session['num_steps'], 'step')}, {counted(session['num_tool_runs'], 'tool run')}, "
        f"{counted(session['num_errors'], 'error')}; "
        f"{session['num_input_tokens']} prompt tokens, {session['num_cached_tokens']} cached "
        f"({_share(session['num_cached_tokens'], session['num_input_tokens']) or NO_VALUE}); "
        f"{session['num_output_tokens']} output tokens{forecasts}",
    ]


def _cut_text(message: Mapping) -> list[str]:
    """The lines of a cut request's last entry (store_rows.capped_entries_json): how much
    was cut, then the start of its JSON, whole, and an ellipsis where it stops."""
    num_entries, num_chars = message.get("num_entries"), message.get("num_chars")
    cut = (f"{num_entries} {'entry' if num_entries == 1 else 'entries'} cut, "
           f"{num_chars:,} characters of JSON" if isinstance(num_entries, int) and isinstance(num_chars, int)
           else "the rest cut")
    lines = printable_lines(message.get("content") or "")
    return [f"{cut}; they began:", *lines[:-1], lines[-1] + " …"]


def _message_text(message: Mapping) -> list[str]:
    """One message as `role: text` lines; tool calls as `name(arguments)`; the entry that
    says a request was cut (`TRUNCATED_ROLE`) as what was cut and how it began."""
    role = str(message.get("role", "?"))
    if role == TRUNCATED_ROLE:
        lines = _cut_text(message)
        return [f"  {role}: {lines[0]}", *(f"  {' ' * len(role)}  {line}" for line in lines[1:])]
    if role == "tool" and message.get("tool_call_id"):
        role = f"tool {message['tool_call_id']}"
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", p)) if isinstance(p, Mapping) else str(p) for p in content)
    lines = printable_lines(content) if content else []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        lines += printable_lines(f"-> {function.get('name')}({function.get('arguments', '')})")
    if not lines:
        lines = [NO_VALUE]
    return [f"  {printable(role)}: {lines[0]}", *(f"  {' ' * len(printable(role))}  {line}" for line in lines[1:])]


CONVERSATION_HEADING = "conversation (messages new in each step's request, then its reply):"


def step_conversation(step: Mapping, content: Mapping | None,
                      previous_output: Mapping | None) -> tuple[list[str], Mapping | None]:
    """One step's new messages and reply (the previous step's reply, sent back, left
    out), and its reply for the next step's call."""
    if content is None:
        return [f"#{step['index']} not captured (capture_content was off: `stepahead serve "
                "--capture-content` or [tracing] capture_content = true keeps it)"], None
    lines = [f"#{step['index']} request:"]
    for message in content["new_messages"]:
        if message != previous_output:   # the last reply, sent back: already shown
            lines += _message_text(message)
    lines.append(f"#{step['index']} reply:")
    lines += _message_text(content["output"]) if content["output"] else ["  " + NO_VALUE]
    return lines, content["output"]


def _conversation(steps: Sequence[tuple[Mapping, Mapping | None]]) -> list[str]:
    lines = ["", CONVERSATION_HEADING]
    previous_output = None
    for step, content in steps:
        step_lines, previous_output = step_conversation(step, content, previous_output)
        lines += step_lines
    return lines


def step_line(step: Mapping, started_s: float) -> str:
    """One step as a line of its own (`traces show --follow`: no table to align with)."""
    (index, at_s, after, gap_s, prompt, from_previous, cached, share, ttft_ms, output, model, worker, asked,
     predicted, actual, eta, error) = _step_row(step, started_s)
    parts = [f"#{index}", f"at {at_s} s", f"after {after}" + (f" ({gap_s} s)" if gap_s is not None else ""),
             f"prompt {prompt}" + (f", from prev {from_previous}" if from_previous is not None else "")
             + f", cached {cached} ({share or NO_VALUE})",
             f"TTFT {ttft_ms or NO_VALUE} ms", f"{output} out", f"{model} on {worker or NO_VALUE}",
             f"asked for {asked}"]
    if predicted is not None:
        parts.append(f"forecast {predicted} -> {actual}" + (f", ETA p50 {eta} s" if eta is not None else ""))
    if step.get("evicted_prefix_tokens"):
        parts.append(f"{step['evicted_prefix_tokens']} prefix tokens evicted while away")
    if error:
        parts.append(f"ERROR {error}")
    return printable("  ".join(str(part) for part in parts))


def _lost_between_steps(steps: Sequence[Mapping]) -> str | None:
    """A line on the steps that found fewer tokens cached than their previous step's prompt
    had in common with them (evicted while the session was away), or None."""
    lost = []
    for step in steps:
        evicted = step.get("evicted_prefix_tokens")
        if evicted:
            lost.append((step["index"], evicted))
    if not lost:
        return None
    return (f"{len(lost)} step(s) found fewer tokens cached than the previous step's prompt shared with them "
            f"(FROM PREV), {sum(n for _, n in lost)} tokens in all, evicted while the session was away: "
            + ", ".join(f"#{index} ({n})" for index, n in lost))


def session_text(session: Mapping, steps: Iterable[tuple[Mapping, Mapping | None]],
                 with_content: bool = False) -> str:
    """One session: summary, steps table (and which steps lost their prefix to
    eviction), and the conversation when `with_content`."""
    steps = list(steps)
    rows = [_step_row(step, session["started_s"]) for step, _ in steps]
    lines = [*_summary(session), "", render_table(_STEP_COLUMNS, rows) if rows else "no steps"]
    lost = _lost_between_steps([step for step, _ in steps])
    if lost:
        lines += ["", lost]
    if with_content:
        lines += _conversation(steps)
    return "\n".join(lines)


_STATS_COLUMNS = (Column("TENANT"), Column("SESSIONS", True), Column("STEPS", True), Column("ERRORS", True),
                  Column("AFTER TOOLS", True), Column("PROMPT TOKENS", True), Column("CACHED", True),
                  Column("OUTPUT TOKENS", True), Column("TTFT P50 MS", True), Column("TTFT P99 MS", True),
                  Column("TOOL GAP P50 S", True), Column("EVICTED PREFIX", True), Column("FORECASTS RIGHT", True))


def _ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1000:.1f}"


def _stats_row(name: str, row: Mapping) -> tuple:
    forecasts = None
    if row["forecasts"]:
        forecasts = f"{row['forecast_hits']}/{row['forecasts']} ({_percent(row['forecast_hit_rate'])})"
    evicted = None
    if row["prefix_from_previous_tokens"]:
        evicted = f"{row['evicted_prefix_tokens']} ({_share(row['evicted_prefix_tokens'], row['prefix_from_previous_tokens'])})"
    return (name, row["sessions"], row["steps"], row["errors"], row["steps_after_tools"], row["prompt_tokens"],
            _share(row["cached_tokens"], row["prompt_tokens"]), row["output_tokens"], _ms(row["ttft_p50_s"]),
            _ms(row["ttft_p99_s"]), _seconds(row["tool_gap_p50_s"]), evicted, forecasts)


def stats_text(stats: Mapping) -> str:
    """`store_stats.tenant_stats` as a table: a row per tenant, then the total, and the
    window the steps came in. EVICTED PREFIX: tokens a step's previous step left it that
    were no longer cached, and their share of all such tokens."""
    if stats["total"] is None:
        return "No steps in this window."
    rows = [_stats_row(row["tenant"], row) for row in stats["tenants"]]
    if len(rows) > 1:
        rows.append(_stats_row("(all)", stats["total"]))
    total = stats["total"]
    return (render_table(_STATS_COLUMNS, rows) + f"\n\nsteps from {local_time(total['first_s'])} "
            f"to {local_time(total['last_s'])}")


def session_json(session: Mapping, steps: Iterable[tuple[Mapping, Mapping | None]],
                 with_content: bool = False) -> str:
    """The session and all its steps as one JSON line (each step's `content` when asked)."""
    out_steps = [{**step, "content": content} if with_content else dict(step) for step, content in steps]
    return terminal_json({"session": dict(session), "steps": out_steps})
