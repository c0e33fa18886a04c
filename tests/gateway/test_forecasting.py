"""Forecasts flow from finished agent steps through the predictor to the engine."""
from __future__ import annotations

import dataclasses
import json
import time

from openai import OpenAI

from agents_trace.step_queries import list_steps
from gateway.forecasting import engine_session_key
from tests.conftest import TINY_GATEWAY_KEYS

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]


def test_engine_session_key_namespaces_by_tenant():
    assert engine_session_key("a", "s1") != engine_session_key("b", "s1")


def test_engine_session_keys_of_distinct_tenant_and_session_pairs_never_meet():
    pairs = [(tenant, session) for tenant in ("t", "t/x", "t/", "", "1:t", "2:t/", "t/x/s") for session in
             ("x/s", "s", "/s", "", "x/s/", "t/x/s", ":t/x")]
    assert len({engine_session_key(tenant, session) for tenant, session in pairs}) == len(pairs)


def test_agent_steps_reach_the_predictor_and_forecasts_reach_the_engine(tiny_gateway):
    relay = tiny_gateway.state.forecasts
    assert relay is not None
    forwarded_before = relay.num_forwarded
    forecasts_before = relay.num_forecasts
    client = OpenAI(base_url=f"{tiny_gateway.base_url}/v1", api_key=TINY_GATEWAY_KEYS["tenant2"],
                    max_retries=0)
    messages = [{"role": "user", "content": "find x"}]
    first = client.chat.completions.create(
        model="tiny", messages=messages, tools=TOOLS, max_tokens=24, temperature=0,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        extra_headers={"x-session-id": "forecast-s1"})
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "x=1"}]
    client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=4,
                                   temperature=0, extra_headers={"x-session-id": "forecast-s1"})
    deadline = time.monotonic() + 15
    while relay.num_forwarded < forwarded_before + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert relay.num_forwarded >= forwarded_before + 2  # one forecast per finished step
    assert tiny_gateway.state.tracer.flush(15)
    # the tracer checks the next step against the forecast the relay forwarded: no second one
    assert relay.num_forecasts == forecasts_before + 2
    assert ("tenant2", "forecast-s1") not in relay._latest
    # The first response asked for `lookup`: the forecast checked against the second step
    # named it (the tenant is cold, and `lookup` new to it), and it came.
    steps = list_steps(tiny_gateway.state.tracer.store_path, "tenant2", "forecast-s1")["data"]
    assert steps[1]["forecast"]["predicted"] == "lookup"
    assert steps[1]["forecast"]["is_hit"] is True
    status = relay.predictor.status("tenant2")
    assert status.num_live_sessions >= 1
    forecast = relay.predictor.forecast("tenant2", "forecast-s1", time.time())
    assert abs(sum(forecast.next_step.values()) - 1.0) < 1e-6


def test_relay_forecaster_makes_a_fresh_forecast_when_none_is_waiting_and_ends_clear():
    from agents_trace.predict.predictor import Predictor
    from agents_trace.records import SessionEnded
    from gateway.forecasting import ForecastRelay

    with Predictor() as predictor:
        relay = ForecastRelay(predictor, {})
        forecast = relay.forecaster("t", "s", time.time())
        assert forecast.session == "s" and relay.num_forecasts == 1
        relay._latest[("t", "s")] = forecast
        assert relay.forecaster("t", "s", time.time()) is forecast  # taken, not remade
        assert relay.num_forecasts == 1
        relay._latest[("t", "s")] = forecast
        relay(SessionEnded("t", "s", 1, None, "idle"))
        assert ("t", "s") not in relay._latest


def make_step(session: str, index: int, arrived_s: float, ended_s: float, tools: tuple[str, ...] = ()):
    from agents_trace.records import After, Step, ToolCall

    return Step(tenant="t", session=session, index=index, session_source="header",
                operation="chat", model="m", agent=None, arrived_s=arrived_s, ended_s=ended_s,
                after=After("start") if index == 0 else After("user"), gap_s=None,
                prev_ended_s=None, num_messages=1 + 2 * index, is_stream=False,
                num_input_tokens=10, num_cached_tokens=0, num_output_tokens=2, ttft_s=0.1,
                worker=None, finish_reason="tool_calls" if tools else "stop",
                tool_calls=tuple(ToolCall(f"c{i}", name) for i, name in enumerate(tools)))


def feed_two_answer_sessions(relay, indices, tenant: str = "t") -> None:
    """Session `u{i}` of `tenant` starts at 10 i s and answers in text twice, its user back
    5 s after the first answer (and never after the second)."""
    for i in indices:
        for step in (make_step(f"u{i}", 0, 10.0 * i, 10.0 * i + 1.0), make_step(f"u{i}", 1, 10.0 * i + 5.0, 10.0 * i + 6.0)):
            relay(dataclasses.replace(step, tenant=tenant))


class RecordingEngine:
    """Records the forecasts a relay hands it; `config.policy` is what it runs."""

    def __init__(self, policy: str) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(policy=policy)
        self.forecasts = []

    def apply_forecast(self, forecast) -> None:
        self.forecasts.append(forecast)


def test_anchor_engines_are_told_the_tool_calls_and_predictive_gets_the_predictor():
    from agents_trace.predict.predictor import Predictor
    from agents_trace.records import SessionEnded
    from gateway.forecasting import ForecastRelay

    now = [100.0]
    engines = {"ours": RecordingEngine("predictive"), "kvflow": RecordingEngine("kvflow"), "ttl": RecordingEngine("ttl")}
    with Predictor() as predictor:
        relay = ForecastRelay(predictor, engines, clock=lambda: now[0])
        for i, took_s in enumerate((2.0, 4.0, 6.0)):   # three earlier sessions ran `lookup`
            relay(make_step(f"old{i}", 0, 10.0, 20.0, ("lookup",)))
            relay(make_step(f"old{i}", 1, 20.0 + took_s, 30.0))
        relay(make_step("s", 0, 90.0, 100.0, ("lookup",)))
        told = engines["kvflow"].forecasts[-1]
        key = engine_session_key("t", "s")
        assert dict(told.next_step) == {"lookup": 1.0} and told.confident and told.session == key
        assert told.eta_s(0.5) == 4.0                 # lookup's median wait, from response end
        assert engines["ttl"].forecasts[-1] == told
        ours = engines["ours"].forecasts[-1]
        assert ours == dataclasses.replace(relay._latest[("t", "s")], session=key)
        assert ours.p_end > 0.0                       # the predictor allows an end; the anchors are not told one
        now[0] = 106.0
        relay(make_step("s", 1, 104.0, 106.0))            # a text answer
        told = engines["kvflow"].forecasts[-1]
        assert dict(told.next_step) == {"USER": 1.0} and not told.waits_on_tool()
        relay(SessionEnded("t", "s", 2, 106.0, "idle"))
        for name in ("kvflow", "ttl"):
            ended = engines[name].forecasts[-1]
            assert ended.p_end == 1.0 and dict(ended.next_step) == {"END": 1.0} and ended.session == key
        assert relay.tool_calls.forecast("t", "s", 107.0) is None
        assert len(engines["ours"].forecasts) == len(engines["kvflow"].forecasts) == 9


def test_a_cold_tenant_gets_the_gap_forecasters_forecast_once_that_one_is_confident():
    """The predictor is not confident after a text answer until the tenant's model is fitted
    (sessions must end first); the gap forecaster, fed the same steps, is once 20 of the
    tenant's waits have resolved. The relay then sends its forecast (made at the step's
    arrival, USER vs END), the tracer checks that same one, and a session's end is still
    the predictor's. Here every session is two text answers, its user back 5 s after the
    first: the gap forecaster learns both that and that nobody comes back after the second."""
    from agents_trace.predict.predictor import Predictor
    from agents_trace.records import SessionEnded
    from gateway.forecasting import ForecastRelay

    now = [0.0]
    engine = RecordingEngine("predictive")
    with Predictor() as predictor:
        relay = ForecastRelay(predictor, {"m": engine}, clock=lambda: now[0])
        relay(make_step("s0", 0, 0.0, 1.0))
        assert not engine.forecasts[-1].confident and relay.num_gap_forecasts == 0
        for i in range(25):
            start = 10.0 * (i + 1)
            now[0] = start + 1.0
            relay(make_step(f"u{i}", 0, start, start + 1.0))
            after_first = engine.forecasts[-1]
            now[0] = start + 6.0
            relay(make_step(f"u{i}", 1, start + 5.0, start + 6.0))
        assert relay.num_gap_forecasts > 0
        assert after_first.confident and set(after_first.next_step) == {"USER", "END"}
        assert after_first.next_step["USER"] > 0.9 and after_first.session == engine_session_key("t", "u24")
        assert after_first.made_at_s == 250.0                  # the step's arrival
        assert 3.0 < after_first.eta_s(0.5) < 8.0              # the learned 5 s gap
        after_second = engine.forecasts[-1]
        assert after_second.confident and after_second.next_step["USER"] < 0.1
        assert relay.forecaster("t", "u24", now[0]) == relay.gaps.forecast("t", "u24", now[0])
        assert not predictor.forecast("t", "u24", now[0]).confident   # the predictor alone is not
        count = relay.num_gap_forecasts
        relay(SessionEnded("t", "u24", 2, 256.0, "idle"))
        ended = predictor.forecast("t", "u24", now[0])
        assert relay.num_gap_forecasts == count
        assert engine.forecasts[-1] == dataclasses.replace(ended, session=engine_session_key("t", "u24"))
        assert relay.gaps.forecast("t", "u24", now[0]) is None   # forgotten with the session
        series = relay.series()
        assert series[("stepahead_forecasts_total", (("source", "gaps"),))] == count > 0
        assert series[("stepahead_forecasts_total", (("source", "predictor"),))] == relay.num_forecasts - count
        assert series[("stepahead_forecasts_forwarded_total", ())] == relay.num_forwarded


def test_gaps_saved_in_one_file_move_to_a_file_per_tenant(tmp_path):
    """A predictor directory saved before the per-tenant files (one `_gaps.json`) is read
    once; the next save writes every tenant's file and removes the old one, and a relay
    restored from the files writes no tenant at its first save (nothing changed)."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from cache.gap_memory import write_gaps
    from cache.tenant_files import tenant_file_stem
    from gateway.forecasting import GAPS_DIR, LEGACY_GAPS_FILE, ForecastRelay

    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        old = ForecastRelay(predictor, {})
        feed_two_answer_sessions(old, range(25))
        write_gaps(old.gaps.learned(), tmp_path / LEGACY_GAPS_FILE)
        migrated = ForecastRelay(predictor, {})
        migrated.restore_gaps(tmp_path)
        assert migrated.gaps.learned() == old.gaps.learned()
        migrated.save(tmp_path)
        tenant_file = tmp_path / GAPS_DIR / f"{tenant_file_stem('t')}.json"
        assert tenant_file.exists() and not (tmp_path / LEGACY_GAPS_FILE).exists()
        inode = tenant_file.stat().st_ino
        resumed = ForecastRelay(predictor, {})
        resumed.restore_gaps(tmp_path)
        assert resumed.gaps.learned() == old.gaps.learned()
        resumed.save(tmp_path)
        assert tenant_file.stat().st_ino == inode   # not written again
        resumed(make_step("later", 0, 900.0, 901.0))
        resumed.save(tmp_path)
        assert tenant_file.stat().st_ino != inode


def test_a_damaged_tenant_gaps_file_is_set_aside_with_a_warning(tmp_path, caplog):
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from cache.tenant_files import tenant_file_stem
    from gateway.forecasting import GAPS_DIR, ForecastRelay

    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        feed_two_answer_sessions(relay, range(3))
        relay.save(tmp_path)
        damaged = tmp_path / GAPS_DIR / f"{tenant_file_stem('t')}.json"
        damaged.write_text("[]")
        restored = ForecastRelay(predictor, {})
        restored.restore_gaps(tmp_path)
        assert restored.gaps.learned_tenants() == [] and "the gap statistics" in caplog.text
        assert not damaged.exists() and [p.read_text() for p in damaged.parent.glob(f"{damaged.name}.damaged-*")] == ["[]"]
        restored.save(tmp_path)   # the tenant's file is not marked as written: nothing to write, and no crash


def test_a_tenants_forecaster_status_says_what_is_fitted_and_what_is_still_learning():
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from gateway.forecasting import ForecastRelay

    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        assert relay.tenants() == []
        cold = relay.tenant_status("nobody")
        assert cold == {"tenant": "nobody",
                        "step_model": {"fitted": False, "sessions_learned": 0, "sessions_to_fit": 8,
                                       "live_sessions": 0, "recent_top1": None, "recent_log_loss": None,
                                       "fit": None},
                        "return_gaps": {"resolved_waits": 0, "waits_to_confident": 20, "confident": False}}
        assert relay.tenants() == []   # asking does not create a tenant
        feed_two_answer_sessions(relay, range(6))
        learning = relay.tenant_status("t")
        # 6 returns, and at most 6 waits after a second answer given up as ends
        assert 6 <= learning["return_gaps"]["resolved_waits"] <= 12
        assert learning["return_gaps"]["confident"] is False
        assert learning["step_model"]["fitted"] is False and learning["step_model"]["live_sessions"] == 6
        predictor.fit_sequences("t", [["USER", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT"]] * 20)
        feed_two_answer_sessions(relay, range(6, 22))
        fitted = relay.tenant_status("t")
        assert relay.tenants() == ["t"]
        assert fitted["return_gaps"]["resolved_waits"] >= 22 and fitted["return_gaps"]["confident"] is True
        model = fitted["step_model"]
        assert model["fitted"] is True and model["fit"]["sessions"] == 20 and model["fit"]["states"] >= 1
        assert model["recent_top1"] is not None and 0.0 <= model["recent_top1"] <= 1.0
        json.dumps(fitted, allow_nan=False)   # plain JSON for the viewer
