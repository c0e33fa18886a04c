"""The gateway freezes its start-up heap for as long as it serves, and thaws it on stop."""
import gc

from fastapi.testclient import TestClient

from gateway.app import build_app
from gateway.config import parse_config
from gateway.heap import YOUNG_THRESHOLD, freeze_startup_heap, thaw_heap


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


def test_a_served_app_is_frozen_while_it_runs():
    config = parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                       "litellm_params": {"mock_response": "hi"}}],
                           "tenants": [{"name": "a", "api_key_sha256": ["0" * 64]}], "tracing": {"enabled": False}})
    before = gc.get_threshold()
    with TestClient(build_app(config)) as client:
        assert client.get("/health").status_code == 200
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
