"""Counts exist exactly while a worker is ready and name only tenants with requests out."""
from shards.outstanding_requests import OutstandingRequests


def test_counts_follow_charges_and_releases_and_drop_idle_tenants():
    loads = OutstandingRequests()
    loads.add_worker("w0")
    loads.charge("w0", "a")
    loads.charge("w0", "a")
    loads.charge("w0", "b")
    assert dict(loads.by_tenant("w0")) == {"a": 2, "b": 1}
    loads.release("w0", "b")
    loads.release("w0", "b")   # more releases than charges never go below nothing
    loads.release("w0", "a")
    assert dict(loads.by_tenant("w0")) == {"a": 1}


def test_a_removed_worker_takes_its_counts_and_a_restart_starts_from_none():
    loads = OutstandingRequests()
    loads.add_worker("w0")
    loads.add_worker("w1")
    loads.charge("w0", "a")
    loads.remove_worker("w0")
    assert "w0" not in loads and list(loads) == ["w1"] and len(loads) == 1
    loads.release("w0", "a")     # a request of the removed worker ends: nothing to do
    loads.release(None, "a")     # one never placed
    loads.add_worker("w0")
    assert dict(loads.by_tenant("w0")) == {}
