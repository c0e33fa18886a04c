"""Each held transfer ends exactly once; the abandoned ones are counted."""
from shards.dispatch_records import DispatchStats
from shards.prefix_transfers import PrefixTransfers


def test_a_fenced_source_abandons_its_copies_and_names_the_requests_waiting_elsewhere():
    stats = DispatchStats()
    transfers = PrefixTransfers(stats)
    out_of_w0 = transfers.start("r1", "w0", "w1", 5.0)
    into_w0 = transfers.start("r2", "w1", "w0", 5.0)
    unrelated = transfers.start("r3", "w1", "w2", 5.0)
    waiting = transfers.abandon_through("w0")
    assert [t.request_id for t in waiting] == ["r1"]   # r2's request was on w0 itself
    assert stats.num_transfers_abandoned == 2
    assert transfers.finish(out_of_w0) is None and transfers.finish(into_w0) is None
    assert transfers.finish(unrelated).request_id == "r3"
    assert transfers.finish(unrelated) is None   # ended once


def test_expiry_takes_only_the_transfers_past_their_deadline_and_cancel_is_not_counted():
    stats = DispatchStats()
    transfers = PrefixTransfers(stats)
    early = transfers.start("r1", "w0", "w1", 1.0)
    late = transfers.start("r2", "w0", "w1", 3.0)
    transfers.start("r3", "w0", "w1", 3.0)
    assert transfers.start("r4", "w0", "w1", 3.0) not in (early, late)
    assert [t.request_id for t in transfers.abandon_expired(2.0)] == ["r1"]
    assert transfers.abandon_expired(2.0) == []
    transfers.forget_request("r3")
    assert stats.num_transfers_abandoned == 1
    assert [t.request_id for t in transfers.abandon_expired(10.0)] == ["r2", "r4"]
