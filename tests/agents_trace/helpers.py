"""Shared pieces for the agents_trace tests: a manual clock, a tracer with an in-memory
span exporter and a temporary store, a scripted agent session, and a small FastAPI app
that mounts the trace router behind a key -> Viewer table."""
from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents_trace.api import Viewer, build_trace_router
from agents_trace.config import TraceConfig
from agents_trace.records import StepResult, ToolCall
from agents_trace.tracer import AgentTracer


@dataclass(slots=True)
class ManualClock:
    now_s: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


def sessions_by_tenant(path) -> dict[str, list[str]]:
    """The sessions of the store at `path`, sorted, by tenant (up to 1,000)."""
    from agents_trace.store_queries import SessionFilter, list_sessions

    out: dict[str, list[str]] = {}
    for row in list_sessions(path, SessionFilter(), limit=1000)["data"]:
        out.setdefault(row["tenant"], []).append(row["session"])
    return {tenant: sorted(sessions) for tenant, sessions in out.items()}


def make_tracer(tmp_path: Path, clock=None, sweep_interval_s: float = 1.0, **config) -> tuple[AgentTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    options = {"store_path": str(tmp_path / "traces.sqlite3"), **config}
    kwargs = {"clock": clock} if clock is not None else {}
    tracer = AgentTracer(TraceConfig(**options), span_processors=(SimpleSpanProcessor(exporter),),
                         environ={}, sweep_interval_s=sweep_interval_s, **kwargs)
    tracer.start()
    return tracer, exporter


SYSTEM = {"role": "system", "content": "You are a travel agent."}
USER = {"role": "user", "content": "Weather in Paris, then book a table."}


def tool_call_message(call_id: str, name: str, arguments: str = "{}") -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def run_scripted_session(tracer: AgentTracer, clock: ManualClock, tenant: str = "acme",
                         headers: dict | None = None, tool_s: tuple[float, float] = (2.0, 3.0),
                         llm_s: float = 0.5, user_text: str | None = None, body: dict | None = None) -> list:
    """tool call -> result -> tool call -> result -> answer, with a manual clock.

    Returns the three StepContexts. Each step has a request id of its own (`chatcmpl-<hex>`,
    stored as its `response_id`, as the gateway's reply's x-request-id); `body`: more fields
    of every request's body."""
    headers = headers or {}
    user = dict(USER, content=user_text) if user_text else USER
    messages = [SYSTEM, user]
    contexts = []
    plan = [("call_w1", "get_weather", '{"city": "Paris"}'),
            ("call_b2", "book_table", '{"where": "Paris"}'), None]
    for step, call in enumerate(plan):
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        ctx = tracer.begin(tenant, headers, {**(body or {}), "model": "tiny", "messages": list(messages)},
                           request_id=request_id)
        contexts.append(ctx)
        clock.advance(llm_s)
        if call is None:
            tracer.end(ctx, StepResult(num_input_tokens=100 * (step + 1), num_cached_tokens=80 * step,
                                       num_output_tokens=12, ttft_s=0.1, worker="w0",
                                       finish_reason="stop", output_text="Booked. Sunny.", response_id=request_id))
            break
        tracer.end(ctx, StepResult(num_input_tokens=100 * (step + 1), num_cached_tokens=80 * step,
                                   num_output_tokens=20, ttft_s=0.1, worker="w1",
                                   finish_reason="tool_calls", response_id=request_id,
                                   tool_calls=(ToolCall(*call),)))
        clock.advance(tool_s[step])
        messages += [tool_call_message(*call), {"role": "tool", "tool_call_id": call[0],
                                                "content": f"result of {call[1]}"}]
    return contexts


def session_with_an_eviction(tmp_path: Path, **config) -> tuple[Path, list]:
    """Session "s" of tenant acme: three steps, each prompt growing the last by 100 tokens
    (fingerprinted); step 2 finds nothing cached. Returns the store and what `end` said of
    each step."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, **config)
    said = []
    for step, cached in enumerate((0, 192, 0)):
        prompt = list(range(200 + 100 * step))
        ctx = tracer.begin("acme", {"x-session-id": "s"},
                           {"model": "m", "messages": [{"role": "user", "content": f"x{i}"} for i in range(step + 1)]})
        clock.advance(0.5)
        said.append(tracer.end(ctx, StepResult(num_input_tokens=len(prompt), num_cached_tokens=cached,
                                               num_output_tokens=3, finish_reason="stop", output_text="ok",
                                               prompt_token_ids=prompt)))
        clock.advance(5.0)
    tracer.stop()
    return tmp_path / "traces.sqlite3", said


def viewer_app(tracer: AgentTracer | Path, keys: dict[str, Viewer], forecasters=None) -> FastAPI:
    """The trace API and /ui over `tracer`'s store (or a store file), with `keys`, and
    `forecasters` (a ForecastRelay or look-alike) behind /v1/traces/forecasters."""
    store_path = tracer if isinstance(tracer, Path) else None
    def viewer(request: Request) -> Viewer:
        scheme, _, key = (request.headers.get("authorization") or "").partition(" ")
        found = keys.get(key.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            raise HTTPException(401, "Invalid API key.")
        return found

    app = FastAPI()
    app.include_router(build_trace_router(viewer=viewer, store_path=lambda _r: store_path or tracer.store_path,
                                          forecasters=None if forecasters is None else lambda _r: forecasters))
    return app


@contextlib.contextmanager
def served_viewer(tracer: AgentTracer, keys: dict[str, Viewer]) -> Iterator[str]:
    """`viewer_app` over `tracer`, served (tests/gateway/serving.start_server): its base URL;
    the server, then the tracer, stopped at the end."""
    from tests.gateway.serving import start_server
    server = start_server(viewer_app(tracer, keys))
    try:
        yield server.base_url
    finally:
        server.stop()
        tracer.stop()


def idle_out(tracer, clock, seconds: float) -> None:
    """Advance the clock past the idle timeout and wait for the sweep to end the sessions."""
    import time

    clock.advance(seconds)
    for _ in range(250):
        if tracer.num_live_sessions == 0:
            break
        time.sleep(0.02)
    assert tracer.num_live_sessions == 0
    assert tracer.flush(5.0)


class ObservedPredictor:
    """A predictor as `symbols.predictor_subscriber` feeds it: the (symbol, gap_s) it
    observed and the (t_s, tool calls) it was told the session waits on."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None]] = []
        self.waits: list[tuple[float, tuple[str, ...]]] = []

    def observe(self, tenant, session, symbol, t_s, gap_s=None) -> None:
        self.seen.append((symbol, gap_s))

    def mark_waiting(self, tenant, session, t_s, tool_calls=()) -> None:
        self.waits.append((t_s, tuple(tool_calls)))


def one_step_sessions(tmp_path: Path, names: list[str]) -> tuple[AgentTracer, Callable[[str], None]]:
    """A tracer whose store holds one short chat step for each session of `names` (tenant
    "acme", one second apart, flushed), and `step(name)`, which adds one more step to a
    session (new or not) a second later: for the sessions list's paging and Live."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)

    def step(name: str) -> None:
        ctx = tracer.begin("acme", {"x-session-id": name}, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        clock.advance(0.1)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=1, finish_reason="stop", output_text="ok"))
        clock.advance(1.0)

    for name in names:
        step(name)
    assert tracer.flush(5.0)
    return tracer, step


def listed_sessions(driver) -> list[str]:
    """The session names the viewer's sessions list shows, top to bottom."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#sessions tbody tr')].map(r => r.cells[0].textContent)")
