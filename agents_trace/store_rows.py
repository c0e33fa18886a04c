"""The trace store's rows: a step as the values of its `steps` row, its session's summary
upsert and its `step_content` row (store.py writes them in one transaction).

Invariant: a `steps` insert never replaces a stored step (a taken index inserts nothing,
rowcount 0); a session's upsert adds the step to its summary and opens it again. Its
`span_*` columns name the `invoke_agent` span of a step that opened one (a row with
`span_opened_s`: its writer had the session closed) when the session named none, with
the totals of that span's steps alone (a row of another writer's span, of the same
session, adds nothing to them); a writer that ends its span clears its ids
(`CLEAR_ENDED_SPAN`), so a session's stored span is one no writer ended: a live one's,
or a dead one's (`LeftOpenSpan`). A named span is never overwritten by an opening: a
writer that opens the session meanwhile (a restart's resume, another gateway) names its
own only once that one is handed over (`SET_SPAN`, writer_store.py), so a live writer's
end still clears it and a dead one's is exported once. The upsert adds to the session's
`num_bytes` what the step's rows store (`store_retention.charged_bytes`) and 1 to its
`num_counted_steps`, as to its `num_steps`: the two stay equal unless an older version's
writer, which adds to `num_steps` alone, stored a step (store_retention.py). The
`step_content` row is content_rows.py's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from agents_trace.records import ForecastCheck, Step
from agents_trace.step_numbering import PlacedPrefix
from agents_trace.step_outcome import generated_nothing


@dataclass(frozen=True, slots=True)
class SessionSpanIds:
    """The ids (hex) of a recording `invoke_agent` span, and of its remote parent (the
    first request's `traceparent`) when it has one."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None


@dataclass(slots=True)
class StepRow:
    """A step to store. `prefix_in_batch`: its content's `prefix_step` is the index of an
    earlier row of the same `write`, which the store follows where that row is moved.
    `session_span`: its `invoke_agent` span (None: none recording); `span_opened_s`: that
    span's start, on the step that opened it; `span_tokens`: the (input, cached input,
    output) tokens that span counts for the step (`spans.used_tokens`); `placed_prefix`:
    the step its content extends as an earlier write stored it (`step_numbering.numbered`)."""

    step: Step
    check: ForecastCheck | None
    trace_id: str | None
    span_id: str | None
    prefix_in_batch: bool = False
    session_span: SessionSpanIds | None = None
    span_opened_s: float | None = None
    span_tokens: tuple[int, int, int] = (0, 0, 0)
    placed_prefix: PlacedPrefix | None = None


@dataclass(frozen=True, slots=True)
class LeftOpenSpan:
    """The open `invoke_agent` span of a session ended for a writer that never did
    (`TraceStore.end_abandoned`): its ids, start, the session's last step's end, and the
    totals of its own steps."""

    tenant: str
    session: str
    agent: str | None
    source: str
    ids: SessionSpanIds
    started_s: float
    last_s: float
    num_steps: int
    num_input_tokens: int
    num_cached_tokens: int
    num_output_tokens: int


def _forecast_json(check: ForecastCheck | None) -> str | None:
    if check is None:
        return None
    return json.dumps({"predicted": check.predicted, "p_predicted": check.p_predicted,
                       "actual": check.actual, "is_hit": check.is_hit,
                       "eta_p50_s": check.eta_p50_s, "p_end": check.p_end,
                       "is_confident": check.is_confident})


def _call_rows(calls, *, has_content: bool) -> list[list[str]]:
    """`[[call_id, name, arguments], ...]`; the arguments are "" unless the step's content
    was captured: they are the model's reply (often the user's data), which
    `capture_content` off keeps out of the store as it keeps the text (QA149 F2)."""
    return [[c.call_id, c.name, c.arguments if has_content else ""] for c in calls]


def _calls_json(calls, *, has_content: bool) -> str:
    return json.dumps(_call_rows(calls, has_content=has_content), ensure_ascii=False)


def _other_choices_json(choices, *, has_content: bool) -> str:
    """`[[finish_reason, [[call_id, name, arguments], ...]], ...]` for choices 1.."""
    return json.dumps([[c.finish_reason, _call_rows(c.tool_calls, has_content=has_content)] for c in choices],
                      ensure_ascii=False)


INSERT_STEP = (   # never replaces a stored step: a taken index inserts nothing (rowcount 0)
    "INSERT INTO steps (tenant, session, idx, request_id, response_id, "
    "operation, model, agent, session_source, arrived_s, ended_s, prev_ended_s, gap_s, "
    "after_kind, after_label, after_tools, num_messages, is_stream, num_input_tokens, "
    "num_cached_tokens, num_output_tokens, ttft_s, worker, finish_reason, tool_calls, "
    "error, error_message, forecast, forecast_hit, trace_id, span_id, has_content, other_choices, "
    "prompt_blocks, service_tier, gateway_started_s) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, session, idx) DO NOTHING")


def _prompt_blocks_json(step: Step) -> str | None:
    """The prompt's block fingerprints as a JSON list, or None when the prompt is unknown
    (an upstream model, several prompts, or recording off)."""
    if step.prompt_blocks is None:
        return None
    return json.dumps(list(step.prompt_blocks), separators=(",", ":"))


# the row opened a span, and the session names none: the columns name it now
_OPENS = "excluded.span_started_s IS NOT NULL AND sessions.span_id IS NULL"
_SPAN_TOTALS = ("span_num_steps", "span_input_tokens", "span_cached_tokens", "span_output_tokens")
UPSERT_SESSION = ("INSERT INTO sessions (tenant, session, agent, source, started_s, last_s, "
            "num_steps, num_errors, num_tool_runs, num_input_tokens, num_cached_tokens, "
            "num_output_tokens, num_forecasts, num_forecast_hits, num_confident_forecasts, "
            "num_confident_forecast_hits, trace_id, span_trace_id, span_id, span_parent_id, span_started_s, "
            "span_num_steps, span_input_tokens, span_cached_tokens, span_output_tokens, num_bytes, "
            "num_counted_steps) "
            "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, 1) "
            "ON CONFLICT (tenant, session) DO UPDATE SET "
            "agent = COALESCE(sessions.agent, excluded.agent), "
            "started_s = MIN(sessions.started_s, excluded.started_s), "
            "last_s = MAX(sessions.last_s, excluded.last_s), ended_s = NULL, end_reason = NULL, "
            "num_steps = sessions.num_steps + 1, "
            "num_errors = sessions.num_errors + excluded.num_errors, "
            "num_tool_runs = sessions.num_tool_runs + excluded.num_tool_runs, "
            "num_input_tokens = sessions.num_input_tokens + excluded.num_input_tokens, "
            "num_cached_tokens = sessions.num_cached_tokens + excluded.num_cached_tokens, "
            "num_output_tokens = sessions.num_output_tokens + excluded.num_output_tokens, "
            "num_forecasts = sessions.num_forecasts + excluded.num_forecasts, "
            "num_forecast_hits = sessions.num_forecast_hits + excluded.num_forecast_hits, "
            "num_confident_forecasts = sessions.num_confident_forecasts + excluded.num_confident_forecasts, "
            "num_confident_forecast_hits = "
            "sessions.num_confident_forecast_hits + excluded.num_confident_forecast_hits, "
            "trace_id = COALESCE(sessions.trace_id, excluded.trace_id), "
            "num_bytes = sessions.num_bytes + excluded.num_bytes, "
            "num_counted_steps = sessions.num_counted_steps + 1, "
            + "".join(f"{column} = CASE WHEN {_OPENS} THEN excluded.{column} ELSE sessions.{column} END, "
                      for column in ("span_trace_id", "span_id", "span_parent_id", "span_started_s"))
            + ", ".join(f"{column} = CASE WHEN {_OPENS} THEN excluded.{column} "
                        f"WHEN sessions.span_id = excluded.span_id THEN sessions.{column} + excluded.{column} "
                        f"ELSE sessions.{column} END" for column in _SPAN_TOTALS))
CLEAR_ENDED_SPAN = ("UPDATE sessions SET span_trace_id = NULL, span_id = NULL, span_parent_id = NULL "
                    "WHERE tenant = ? AND session = ? AND span_id = ?")   # (tenant, session, its span id)
_SELECT_SPAN = ("SELECT tenant, session, agent, source, span_trace_id, span_id, span_parent_id, "
                "COALESCE(span_started_s, started_s), last_s, " + ", ".join(_SPAN_TOTALS) +
                " FROM sessions WHERE tenant = ? AND session = ? AND span_id IS NOT NULL")
SELECT_LEFT_OPEN_SPAN = _SELECT_SPAN + " AND ended_s IS NULL AND last_s < ?"   # (tenant, session, before_s)
SELECT_NAMED_SPAN = _SELECT_SPAN   # (tenant, session): the span no writer ended that the session names
# (trace id, span id, parent id, started_s, its 4 totals, tenant, session, the span id named now, or None)
SET_SPAN = ("UPDATE sessions SET span_trace_id = ?, span_id = ?, span_parent_id = ?, span_started_s = ?, "
            + ", ".join(f"{column} = ?" for column in _SPAN_TOTALS) +
            " WHERE tenant = ? AND session = ? AND span_id IS ?")


def left_open_span(row: tuple) -> LeftOpenSpan:
    """A row of `SELECT_LEFT_OPEN_SPAN` as a LeftOpenSpan."""
    (tenant, session, agent, source, trace_id, span_id, parent_span_id, started_s, last_s,
     num_steps, num_input, num_cached, num_output) = row
    return LeftOpenSpan(tenant, session, agent, source, SessionSpanIds(trace_id, span_id, parent_span_id),
                        started_s, last_s, num_steps, num_input, num_cached, num_output)
# a `steps` row that failed without generating anything (`step_outcome.generated_nothing`,
# export's `is_left_out`), as an SQL condition
GENERATED_NOTHING = "(error IS NOT NULL AND num_output_tokens = 0)"
# a `steps` row a model ran (`reached_model`), as an SQL condition (store_stats' token sums)
REACHED_MODEL_SQL = "(error IS NULL OR worker IS NOT NULL OR ttft_s IS NOT NULL OR num_output_tokens > 0)"


def reached_model(step: Step) -> bool:
    """Whether a model ran the step: it succeeded, or it failed after a model started on it
    (a worker named, a first token, or output tokens). A failed step with none of them
    never reached one (its tenant's limits refused it, a prompt over the context, its
    client left while it queued): its row keeps the prompt's size, for display, and its
    session's totals (`session_values`, as its span's: spans.used_tokens) add none of it."""
    return (step.error is None or step.worker is not None or step.ttft_s is not None
            or step.num_output_tokens > 0)


def _tool_runs(step: Step) -> int:
    """The tool runs a step adds to its session's `num_tool_runs`: one per tool result it
    carries, none for a step that generated nothing (its retry counts them), nor for the
    retry of one cut part-way (`Step.repeats_tool_runs`: that one counted them)."""
    return 0 if generated_nothing(step) or step.repeats_tool_runs else len(step.after.tools)


def session_values(row: StepRow, num_bytes: int = 0) -> tuple:
    """The values of `UPSERT_SESSION` for `row`'s step, which stores `num_bytes` (its rows'
    `store_retention.charged_bytes`)."""
    step, check = row.step, row.check
    is_hit = 1 if check is not None and check.is_hit else 0
    is_confident = 1 if check is not None and check.is_confident else 0
    return (step.tenant, step.session, step.agent, step.session_source, step.arrived_s,
            step.ended_s, 1 if step.error is not None else 0, _tool_runs(step),
            *((step.num_input_tokens, step.num_cached_tokens, step.num_output_tokens) if reached_model(step)
              else (0, 0, 0)), 1 if check is not None else 0, is_hit,
            is_confident, is_confident * is_hit, row.trace_id, *_span_values(row), num_bytes)


def _span_values(row: StepRow) -> tuple:
    """The `span_*` values of `UPSERT_SESSION` (`span_num_steps` is 1, in the SQL)."""
    ids = row.session_span
    if ids is None:
        return (None, None, None, row.span_opened_s, 0, 0, 0)
    num_input, num_cached, num_output = row.span_tokens
    return (ids.trace_id, ids.span_id, ids.parent_span_id, row.span_opened_s, num_input, num_cached, num_output)


def step_values(row: StepRow, *, has_content: bool, gateway_started_s: float | None = None) -> list:
    """The values of `INSERT_STEP` for `row` (a list: the index, [2], may be changed).
    `has_content`: its content is stored (`capture_content` on); without it, its tool
    calls' arguments are stored as "" (`_call_rows`). `gateway_started_s`: when the
    writing gateway process started (store_schema.py)."""
    step, check = row.step, row.check
    return [step.tenant, step.session, step.index, step.request_id, step.response_id,
            step.operation, step.model, step.agent, step.session_source, step.arrived_s,
            step.ended_s, step.prev_ended_s, step.gap_s, step.after.kind, step.after.label,
            _calls_json(step.after.tools, has_content=has_content), step.num_messages, int(step.is_stream),
            step.num_input_tokens, step.num_cached_tokens, step.num_output_tokens,
            step.ttft_s, step.worker, step.finish_reason, _calls_json(step.tool_calls, has_content=has_content),
            step.error, step.error_message, _forecast_json(check),
            None if check is None else int(check.is_hit), row.trace_id, row.span_id,
            int(has_content), _other_choices_json(step.other_choices, has_content=has_content),
            _prompt_blocks_json(step),
            step.service_tier, gateway_started_s]
