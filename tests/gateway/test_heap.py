"""The gateway freezes its start-up heap for as long as it serves, and thaws it on stop."""
import gc

from fastapi.testclient import TestClient

from gateway.app import build_app
from gateway.config import key_digest, parse_config
import pytest

from gateway.config_values import ConfigError
from gateway.heap import YOUNG_THRESHOLD, GcPauses, freeze_startup_heap, thaw_heap


def test_freeze_hides_the_startup_heap_from_collections_and_thaw_puts_it_back():
    before = gc.get_threshold()
    kept = [[n] for n in range(1000)]   # live objects the collector tracks
    settings = freeze_startup_heap()
    try:
        assert gc.get_freeze_count() >= len(kept)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        walked = {id(o) for o in gc.get_objects()}   # what a collection would walk
        assert not any(id(o) in walked for o in kept)
    finally:
        thaw_heap(settings)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    walked = {id(o) for o in gc.get_objects()}
    assert all(id(o) in walked for o in kept)


def test_pauses_are_counted_by_generation_while_installed():
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        pauses.remove()
    gc.collect(2)   # after remove: not counted
    young, _, full = pauses.generations
    assert (young.num_collections, full.num_collections) == (1, 2)
    assert 0 < full.max_s <= full.total_s and young.total_s > 0
    series = pauses.series()
    assert series[("stepahead_gc_collections_total", (("generation", "2"),))] == 2.0
    assert series[("stepahead_gc_pause_max_seconds", (("generation", "2"),))] == full.max_s


def _config(**server):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": "ops", "api_key_sha256": [key_digest("k-ops")], "admin": True},
                                     {"name": "a", "api_key_sha256": [key_digest("k-a")]}],
                         "tracing": {"enabled": False}, "server": server})


def test_a_served_app_is_frozen_while_it_runs_and_admins_see_its_pauses():
    before = gc.get_threshold()
    with TestClient(build_app(_config())) as client:
        assert client.get("/health").status_code == 200
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == YOUNG_THRESHOLD
        gc.collect()
        admin = client.get("/metrics", headers={"authorization": "Bearer k-ops"}).text
        tenant = client.get("/metrics", headers={"authorization": "Bearer k-a"}).text
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    assert "# TYPE stepahead_gc_collections_total counter" in admin
    full = [line for line in admin.splitlines() if line.startswith('stepahead_gc_collections_total{generation="2"}')]
    assert len(full) == 1 and float(full[0].split()[-1]) >= 1
    assert "stepahead_gc_" not in tenant   # the process's own figures are for admins


def test_freezing_can_be_turned_off():
    assert _config().freeze_startup_heap is True
    frozen_before = gc.get_freeze_count()
    with TestClient(build_app(_config(freeze_startup_heap=False))) as client:
        assert client.get("/health").status_code == 200
        assert gc.get_freeze_count() == frozen_before
    with pytest.raises(ConfigError, match="server.freeze_startup_heap must be"):
        _config(freeze_startup_heap="yes")


def _no_walk() -> int:
    raise AssertionError("gc.get_freeze_count() walks every frozen object: not at a scrape")


def test_series_reports_the_count_taken_at_install_without_walking_the_frozen_heap(monkeypatch):
    """QA64: every admin scrape walked ~210,000 frozen objects on the event loop (0.2-0.3 s)."""
    pauses = GcPauses()
    monkeypatch.setattr(gc, "get_freeze_count", lambda: 123_456)   # the count once the heap was frozen
    pauses.install()
    try:
        monkeypatch.setattr(gc, "get_freeze_count", _no_walk)
        series = pauses.series()
        assert series[("stepahead_gc_frozen_objects", ())] == 123_456.0
        monkeypatch.setattr(gc, "get_freeze_count", lambda: 7)   # frozen again: the next install takes it
        pauses.install()
    finally:
        pauses.remove()
    monkeypatch.setattr(gc, "get_freeze_count", _no_walk)
    assert pauses.series()[("stepahead_gc_frozen_objects", ())] == 7.0


def test_an_admin_scrape_reports_the_frozen_heap_without_counting_it_again(monkeypatch):
    with TestClient(build_app(_config())) as client:
        frozen_now = gc.get_freeze_count()   # the app froze its heap as it started; some died since
        monkeypatch.setattr(gc, "get_freeze_count", _no_walk)
        admin = client.get("/metrics", headers={"authorization": "Bearer k-ops"})
        monkeypatch.undo()
        assert admin.status_code == 200
        taken = client.app.state.gateway.gc_pauses.num_frozen_objects
    assert f"\nstepahead_gc_frozen_objects {taken}\n" in admin.text
    assert 0 < frozen_now <= taken   # nothing joins the frozen objects but a freeze
