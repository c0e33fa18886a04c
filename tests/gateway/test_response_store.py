"""The Responses API's store: bounded, least recently used out first, per tenant."""
from gateway.response_store import ResponseStore, StoredResponse


def _stored(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id}, ({"role": "user", "content": response_id},))


def test_store_is_per_tenant_and_evicts_the_least_recently_used():
    store = ResponseStore(capacity=2)
    store.put("a", _stored("r1"))
    store.put("a", _stored("r2"))
    assert store.get("b", "r1") is None  # another tenant never sees it
    assert store.get("a", "r1").messages[0]["content"] == "r1"  # r1 is now the most recent
    store.put("a", _stored("r3"))
    assert len(store) == 2 and store.get("a", "r2") is None  # r2 was the least recently used
    assert store.get("a", "r1") is not None and store.get("a", "r3") is not None


def test_one_tenants_traffic_never_evicts_anothers_responses():
    store = ResponseStore(capacity=2)
    store.put("quiet", _stored("q1"))
    for index in range(10):
        store.put("noisy", _stored(f"n{index}"))
    assert store.get("quiet", "q1") is not None
    assert [store.get("noisy", f"n{i}") is not None for i in range(10)] == [False] * 8 + [True] * 2
    assert len(store) == 3


def test_delete_forgets_only_the_owners_response():
    store = ResponseStore()
    store.put("a", _stored("r1"))
    assert not store.delete("b", "r1") and store.get("a", "r1") is not None
    assert store.delete("a", "r1") and store.get("a", "r1") is None and not store.delete("a", "r1")
