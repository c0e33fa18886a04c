"""QA174 / FI89: an admin's `/metrics` scrape of hundreds of tenants (~20k series) is copied
on the event loop and sorted and formatted in a thread, so it does not hold every other
request for the whole render; the text stays what it was."""
from __future__ import annotations

import asyncio
import sys
import time
import tomllib

import httpx
import pytest

from gateway.app import build_app
from gateway.config import parse_config
from gateway.metrics import HELP, OVERHEAD_BUCKETS_S, Registry, _labels, _number
from tests.gateway.test_reload import MODEL, _tenant

NUM_TENANTS = 300


def populated(registry: Registry, num_tenants: int = NUM_TENANTS) -> Registry:
    """About what QA174's 300-tenant gateway held after a request per tenant: per tenant a
    few request counts, tokens on two workers, TTFT histograms (two tiers on one worker),
    the gateway's overhead histogram and prefix reuse; ~20k lines."""
    for index in range(num_tenants):
        tenant = f"t{index}"
        for status in (200, 429):
            registry.record_request(tenant, "m", "chat", status)
        registry.record_request(tenant, "m", "completions", 200)
        for worker in ("w0", "w1"):
            registry.record_finish(tenant=tenant, model="m", worker=worker, finish_reason="stop",
                                   num_prompt_tokens=100 + index, num_cached_tokens=64, num_output_tokens=7,
                                   ttft_s=0.001 * (index % 50) + 0.0005)
        registry.record_finish(tenant=tenant, model="m", worker="w0", finish_reason="length",
                               num_prompt_tokens=10, num_cached_tokens=0, num_output_tokens=3, ttft_s=2.5,
                               service_tier="flex")
        registry.record_overhead(tenant, 0.0003 * (index % 7))
        registry.record_prefix_reuse(tenant, "m", 90, 60)
        registry.record_rejection(tenant, "rate_limit_exceeded")
    return registry


def _gauges(num_tenants: int = NUM_TENANTS) -> dict:
    gauges = {}
    for index in range(num_tenants):
        labels = (("tenant", f"t{index}"),)
        gauges[("stepahead_tenant_active_requests", labels)] = float(index % 3)
        gauges[("stepahead_tenant_queued_requests", labels)] = 0.0
        base = (("model_name", "m"), ("worker", "w0"), ("tenant", f"t{index}"))
        gauges[("stepahead_worker_tenant_level", base + (("field", "num_hot_blocks"),))] = float(index)
        gauges[("stepahead_worker_tenant_counts_total", base + (("field", "num_requests"),))] = 0.5 + index
    gauges[("stepahead_gc_pause_max_seconds", (("generation", "2"),))] = 0.0125
    return gauges


def _reference_render(registry: Registry, gauges: dict | None = None, tenant: str | None = None) -> str:
    """The render as it was before FI89 (all on the caller's thread), the oracle the new
    one must match byte for byte."""
    own = registry._keys_of_tenant.get(tenant, []) if tenant is not None else None

    def visible(series: dict, indexed: bool = True) -> list:
        if tenant is None:
            items = series.items()
        elif indexed:
            items = ((key, series[key]) for key in own if key in series)
        else:
            items = (item for item in series.items() if ("tenant", tenant) in item[0][1])
        return sorted(items, key=lambda item: item[0])

    by_name: dict[str, list[str]] = {}
    for (name, labels), value in visible(registry.counters):
        by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
    for (name, labels), value in visible(gauges or {}, indexed=False):
        by_name.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
    for (name, labels), histogram in visible(registry.histograms):
        lines = by_name.setdefault(name, [])
        cumulative = 0
        for bound, count in zip(histogram.buckets, histogram.counts):
            cumulative += count
            lines.append(f"{name}_bucket{_labels(labels + (('le', _number(bound)),))} {cumulative}")
        lines.append(f"{name}_bucket{_labels(labels + (('le', '+Inf'),))} {histogram.num_observations}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(histogram.total)}")
        lines.append(f"{name}_count{_labels(labels)} {histogram.num_observations}")
    out: list[str] = []
    for name, lines in by_name.items():
        kind, text = HELP.get(name, ("untyped", name))
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"


def test_the_render_is_byte_identical_to_the_old_one_for_admins_and_tenants_and_twice():
    registry = populated(Registry(), 40)
    registry.record_request('q"x\\', "m\n", "chat", 200)   # escaped labels, cached as escaped
    registry.observe("unlabelled_seconds", (), 0.3, OVERHEAD_BUCKETS_S)   # no labels: `{le="..."}`
    registry.inc("unlabelled_total", (), 2.5)
    gauges = _gauges(40)
    for _ in range(2):   # the second render reads the label texts the first one kept
        assert registry.render(gauges) == _reference_render(registry, gauges)
        for tenant in ("t0", "t7", 'q"x\\', "nobody"):
            assert registry.render(gauges, tenant=tenant) == _reference_render(registry, gauges, tenant)
        assert registry.render() == _reference_render(registry)
        registry.record_finish(tenant="t3", model="m", worker="w0", finish_reason="stop", num_prompt_tokens=1,
                               num_cached_tokens=0, num_output_tokens=1, ttft_s=0.07)
    assert 'unlabelled_seconds_bucket{le="0.0001"} 0' in registry.render()


def test_a_snapshot_keeps_the_series_as_they_were_while_the_loop_records_on():
    registry = populated(Registry(), 5)
    before = registry.render(_gauges(5))
    snapshot = registry.snapshot(_gauges(5))
    populated(registry, 8)   # every existing series changes, and new ones come
    assert registry.render_snapshot(snapshot) == before
    tenant_before = _reference_render(registry, tenant="t2")
    tenant_snapshot = registry.snapshot(tenant="t2")
    registry.record_overhead("t2", 0.01)
    assert registry.render_snapshot(tenant_snapshot) == tenant_before != registry.render(tenant="t2")


CONFIG = MODEL + _tenant("ops", "sk-ops", "admin = true") + _tenant("t0", "sk-t0")


async def _scrape_with_ticker(app, key: str) -> tuple[httpx.Response, float, float, list[float]]:
    """One scrape of `/metrics` while a 5 ms ticker runs on the same loop: the response,
    the scrape's start and end, and the ticker's ticks."""
    ticks: list[float] = []
    stopping = asyncio.Event()

    async def ticker() -> None:
        while not stopping.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway",
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        await client.get("/health")   # the client's own first-use costs, off the measured scrape
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.03)
        began_s = time.perf_counter()
        response = await client.get("/metrics")
        ended_s = time.perf_counter()
        stopping.set()
        await task
    return response, began_s, ended_s, ticks


@pytest.fixture()
def render_spans(monkeypatch) -> list[tuple[float, float]]:
    """The (start, end) of each `Registry.render` / `render_snapshot` call (any thread)."""
    spans: list[tuple[float, float]] = []

    def timed(method):
        def wrapper(self, *args, **kwargs):
            began_s = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spans.append((began_s, time.perf_counter()))
        return wrapper

    for name in ("render", "render_snapshot"):   # before FI89 the route called `render`
        if hasattr(Registry, name):
            monkeypatch.setattr(Registry, name, timed(getattr(Registry, name)))
    return spans


def test_an_admin_scrape_of_300_tenants_leaves_the_loop_free_while_it_renders(render_spans):
    """Before, the ~20k series were sorted and formatted on the loop: not one tick came
    while they rendered (nor during the whole scrape). Now the ticker, on the same loop,
    ticks all through the render. Counts, not milliseconds, so a loaded machine makes both
    sides slower; the GIL is handed between threads every 1 ms (not 5) so that the loop's
    few steps per tick do not each wait out a 5 ms turn of the rendering thread."""
    app = build_app(parse_config(tomllib.loads(CONFIG)))
    state = app.state.gateway
    populated(state.metrics)
    interval_s = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        response, began_s, ended_s, ticks = asyncio.run(_scrape_with_ticker(app, "sk-ops"))
    finally:
        sys.setswitchinterval(interval_s)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert len(render_spans) == 1
    render_began_s, render_ended_s = render_spans[0]
    assert began_s < render_began_s < render_ended_s < ended_s
    during_render = [tick for tick in ticks if render_began_s < tick < render_ended_s]
    during_scrape = [tick for tick in ticks if began_s < tick < ended_s]
    assert len(during_render) >= 3, (len(during_render), len(during_scrape), render_ended_s - render_began_s)
    text = response.text
    assert text.count("\n") > 15_000 and 'vllm:prompt_tokens_total{tenant="t299",model_name="m",worker="w1"}' in text
    assert _registry_families(state.metrics, text) == state.metrics.render()


def test_a_tenants_scrape_still_shows_only_its_own_series():
    app = build_app(parse_config(tomllib.loads(CONFIG)))
    populated(app.state.gateway.metrics, 3)
    response, *_ = asyncio.run(_scrape_with_ticker(app, "sk-t0"))
    assert response.status_code == 200
    text = response.text
    assert 'tenant="t0"' in text and 'tenant="t1"' not in text and 'tenant="t2"' not in text
    assert 'stepahead_tenant_active_requests{tenant="t0"} 0' in text
    registry = app.state.gateway.metrics
    assert _registry_families(registry, text) == registry.render(tenant="t0")


def _registry_families(registry: Registry, text: str) -> str:
    """`text` but the families the registry does not hold (the scrape-time gauges: the
    tenants', the gc's, the archive's), which leaves what `registry.render()` shows."""
    names = {name for name, _ in (*registry.counters, *registry.histograms)}
    blocks = ["# HELP " + block for block in text.split("# HELP ")[1:]]
    return "".join(block for block in blocks if block.split(" ", 3)[2] in names)
