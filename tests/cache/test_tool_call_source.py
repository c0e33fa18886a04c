"""ToolCallSource: what the anchor policies are told (known answers, isolation)."""
from __future__ import annotations

import pytest

from cache.forecast_source import RequestSeen
from cache.tool_call_source import QUANTILES, ToolCallSource


def wait(source: ToolCallSource, tenant: str, session: str, tool: str, start_s: float, duration_s: float) -> None:
    source.observe(RequestSeen(tenant, session, start_s, tool_calls=(tool,)))
    source.observe(RequestSeen(tenant, session, start_s + duration_s, after=f"tool:{tool}"))


def test_tool_forecast_names_the_tool_and_its_duration_quantiles() -> None:
    source = ToolCallSource(min_samples=3)
    for i, duration_s in enumerate((2.0, 4.0, 6.0)):
        wait(source, "t", f"s{i}", "search", 100.0 * i, duration_s)
    source.observe(RequestSeen("t", "A", 500.0, tool_calls=("search", "read")))
    forecast = source.forecast("t", "A", 500.0)
    assert dict(forecast.next_step) == {"search": 1.0}
    assert forecast.confident and forecast.waits_on_tool() and forecast.p_end == 0.0
    etas = dict(forecast.eta_quantiles_s)
    assert tuple(etas) == QUANTILES
    assert etas[0.5] == pytest.approx(4.0)            # the median of 2, 4, 6
    assert etas[0.05] == pytest.approx(2.2)           # numpy's linear quantile
    assert source.forecast("t", "A", 501.0).eta_s(0.5) == pytest.approx(3.0)  # one second waited


def test_a_tool_with_little_history_borrows_the_tenants_pooled_durations() -> None:
    source = ToolCallSource(min_samples=3)
    assert source.duration_quantiles("t", "search") == ()
    for i, duration_s in enumerate((10.0, 20.0, 30.0)):
        wait(source, "t", f"s{i}", "search", 100.0 * i, duration_s)
    wait(source, "t", "x", "read", 1000.0, 1.0)
    assert dict(source.duration_quantiles("t", "read"))[0.5] == pytest.approx(15.0)  # pooled: 1, 10, 20, 30
    assert source.duration_quantiles("other", "search") == ()  # tenants never share


def test_text_answers_forecast_the_user_and_unknown_sessions_nothing() -> None:
    source = ToolCallSource()
    assert source.forecast("t", "A", 0.0) is None
    source.observe(RequestSeen("t", "A", 0.0))
    forecast = source.forecast("t", "A", 1.0)
    assert dict(forecast.next_step) == {"USER": 1.0}
    assert not forecast.waits_on_tool() and forecast.eta_quantiles_s == ()
    source.observe(RequestSeen("t", "A", 50.0))  # a wait after a text answer is no tool's
    assert source.duration_quantiles("t", "USER") == ()


def test_a_wait_counts_from_the_response_end_when_the_gateway_knows_it() -> None:
    source = ToolCallSource(min_samples=1)
    source.observe_step("t", "A", 10.0, 12.5, ("search",))   # asked for search, answered at 12.5
    source.observe_step("t", "A", 15.5, 16.0, ())            # the tool's result came at 15.5
    assert dict(source.duration_quantiles("t", "search"))[0.5] == pytest.approx(3.0)
    source.observe_step("t", "A", 20.0, 21.0, ("search",))
    assert source.forecast("t", "A", 21.0).eta_s(0.5) == pytest.approx(3.0)
    source.forget("t", "A")
    assert source.forecast("t", "A", 21.0) is None
    assert source.duration_quantiles("t", "search")      # what was learned stays


def test_tools_kept_by_name_are_bounded_per_tenant_and_the_rest_pool() -> None:
    source = ToolCallSource(min_samples=1, max_tools=2)
    for i, (tool, duration_s) in enumerate((("a", 1.0), ("b", 2.0), ("c", 30.0), ("c", 30.0))):
        wait(source, "t", f"s{i}", tool, 100.0 * i, duration_s)
    durations = source._tenants["t"]
    assert set(durations.by_tool) == {"a", "b"} and len(durations.pooled) == 4
    assert dict(source.duration_quantiles("t", "c"))[0.5] == pytest.approx(16.0)   # pooled: 1, 2, 30, 30
    wait(source, "u", "s0", "c", 0.0, 5.0)
    assert dict(source.duration_quantiles("u", "c"))[0.5] == pytest.approx(5.0)     # another tenant's own bound
