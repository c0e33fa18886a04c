"""The records that cross from the request path to the trace writer and subscribers.

A request becomes a `StepContext` in `AgentTracer.begin` (mutable, owned by that request
until `end`), then one immutable `Step` once it finished. When a session goes idle (or
the tracer stops) one `SessionEnded` follows its last Step. Invariants: within a session
step indexes are 0, 1, 2, ... in arrival order with no gaps (a Step dropped on a full
queue is the only way one can go missing, and it is counted); times are Unix seconds
from one clock, so `gap_s == arrived_s - prev_ended_s` whenever it is known, `prev_ended_s`
being the end of the session's last response before the step arrived (sessions.py: a step
that failed without generating anything is none, and has no gap of its own).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NewType

from opentelemetry.trace import SpanContext

SessionId = NewType("SessionId", str)

AfterKind = Literal["start", "user", "tools"]
# How the session id was found: client header/field, conversation prefix, or a new one.
SessionSource = Literal["header", "metadata", "user", "prefix", "new"]
EndReason = Literal["idle", "shutdown", "evicted", "failed"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call: asked for by a response, or answered by a tool message.

    `arguments` is the call's JSON text when known (a response's own calls), else "".
    """

    call_id: str
    name: str
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class After:
    """What happened between the previous response and this request.

    `kind` "tools" always comes with at least one entry in `tools` (the tool results the
    request carries, in message order); "start" and "user" never do.
    """

    kind: AfterKind
    tools: tuple[ToolCall, ...] = ()

    @property
    def label(self) -> str:
        """`start`, `user`, or `tool:a,tool:b` as in `stepahead-trace/1`."""
        if self.kind != "tools":
            return self.kind
        return ",".join(f"tool:{name}" for name in self.tool_names)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Distinct tool names in first-seen order."""
        return tuple(dict.fromkeys(call.name for call in self.tools))


@dataclass(frozen=True, slots=True)
class CapturedContent:
    """Message content, present only when the config opts in.

    `new_messages` are the request's messages after the first `num_prefix_messages`,
    which are the same as those of step `prefix_step` of the same session (None: the
    request is whole in `new_messages`), then the request's parts that are not messages
    (content.py: its tools, or a completions request's prompts, as entries no message can
    be mistaken for); `output` is the response's assistant message (after an error, the
    part the client was sent, as a stream its client cut keeps; None when it was sent
    nothing; `other_outputs` those of choices 1.. when the request asked for several);
    `all_messages` is the whole request, for span attributes; `system_instructions` the
    instructions the API took apart from the chat (a Responses request's `instructions`),
    which are then `all_messages[0]`, the system message the model read them as.
    NOTE: these are the request's own objects, serialised on the writer thread.
    """

    new_messages: tuple
    num_prefix_messages: int
    prefix_step: int | None
    output: dict | None
    all_messages: tuple = ()
    other_outputs: tuple[dict, ...] = ()   # the assistant messages of choices 1..
    system_instructions: str | None = None   # apart from the chat (gen_ai.system_instructions)


@dataclass(slots=True)
class StepContext:
    """A request between `begin` and `end`. Only the tracer writes it, but for
    `is_prefix_cached`, which the gateway sets before `end` (gateway/exchange.py): False
    when the model that served the step keeps no prefix cache (a local engine with
    `prefix_caching = false`), so the step has no reuse to count, nor any eviction."""

    tenant: str
    session: SessionId
    index: int
    session_source: SessionSource
    operation: str
    model: str
    agent: str | None
    arrived_s: float
    after: After
    gap_s: float | None
    prev_ended_s: float | None
    num_messages: int
    is_stream: bool
    request_id: str | None = None
    remote_parent: SpanContext | None = None
    conversation_digest: bytes | None = None
    num_prefix_messages: int = 0
    prefix_step: int | None = None
    messages: tuple = ()
    request_entries: tuple[dict, ...] = ()   # captured parts besides messages (content.py)
    system_instructions: str | None = None   # captured: instructions apart from the chat (CapturedContent)
    request_params: tuple[tuple[str, float | int | str | tuple[str, ...]], ...] = ()   # span attributes
    replay_tool_calls: tuple[ToolCall, ...] = ()
    is_ended: bool = False
    service_tier: str | None = None   # "flex" when served after the default tier
    is_prefix_cached: bool = True   # its model may serve prompts' prefixes from a cache
    arrived_late_s: float = 0.0   # how much later `arrived_s` is than the request began (held at its prior end)
    repeats_tool_runs: bool = False   # its tool results were carried already (tool_run_starts.py): no run, no gap


@dataclass(frozen=True, slots=True)
class ChoiceOutput:
    """Choice k >= 1 of a request that asked for several (`n`, or several prompts): how it
    ended and the tools it asked for. `text` travels only as far as captured content; the
    trace store and span attributes never keep it."""

    finish_reason: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    text: str | None = None


@dataclass(slots=True)
class StepResult:
    """How a request ended, as the gateway saw it. `error` is the error type (an OpenAI
    error code/type, or "client_closed") and None on success, `error_message` what it
    knew of it in words. A failed step carries what was known when it ended: the output
    it had sent (`output_text`, `tool_calls`), the tokens generated until then."""

    num_input_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    ttft_s: float | None = None
    worker: str | None = None
    finish_reason: str | None = None
    output_text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    response_id: str | None = None
    error: str | None = None
    error_message: str | None = None
    other_choices: tuple[ChoiceOutput, ...] = ()   # choices 1.. (choice 0 is the fields above)
    prompt_token_ids: Sequence[int] | None = None   # the prompt as the model read it, if known

    def replies(self) -> list[tuple[str | None, tuple[ToolCall, ...]]]:
        """Every choice's (text, tool calls), choice 0 first."""
        return [(self.output_text, self.tool_calls)] + [(c.text, c.tool_calls) for c in self.other_choices]


@dataclass(frozen=True, slots=True)
class Step:
    """One finished LLM call of an agent session (see the module docstring)."""

    tenant: str
    session: SessionId
    index: int
    session_source: SessionSource
    operation: str
    model: str
    agent: str | None
    arrived_s: float
    ended_s: float
    after: After
    gap_s: float | None
    prev_ended_s: float | None
    num_messages: int
    is_stream: bool
    num_input_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    ttft_s: float | None
    worker: str | None
    finish_reason: str | None
    tool_calls: tuple[ToolCall, ...]
    request_id: str | None = None
    response_id: str | None = None
    error: str | None = None
    error_message: str | None = None
    remote_parent: SpanContext | None = None
    content: CapturedContent | None = None
    request_params: tuple[tuple[str, float | int | str | tuple[str, ...]], ...] = ()   # span attributes
    other_choices: tuple[ChoiceOutput, ...] = ()   # choices 1.., without their text
    prompt_blocks: tuple[int, ...] | None = None   # the prompt's fingerprints (prompt_blocks.py)
    service_tier: str | None = None   # the tier it was served in ("default", "flex"), when known
    repeats_tool_runs: bool = False   # a retry carrying results carried already: adds no tool run

    @property
    def is_text_answer(self) -> bool:
        return self.error is None and not self.tool_calls


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """A session went idle, was evicted for room, the tracer stopped, or its only step
    failed and nothing can continue it ("failed": `SessionTable.end_if_unreachable`).

    `last_ended_s` is when its last response ended (None if none finished).
    """

    tenant: str
    session: SessionId
    num_steps: int
    last_ended_s: float | None
    reason: EndReason


@dataclass(slots=True)
class ForecastCheck:
    """The forecast made when the previous response ended, against what happened.

    `predicted` is the most likely next symbol, `actual` this step's `after` symbol (see
    symbols.py); `eta_p50_s` is compared with the step's `gap_s` by the viewer.
    """

    predicted: str
    p_predicted: float
    actual: str
    is_hit: bool
    eta_p50_s: float | None = None
    p_end: float = 0.0
    is_confident: bool = False


TraceEvent = Step | SessionEnded
