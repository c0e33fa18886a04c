"""What a block manager reads back from its policy for the worker's stats: pins set,
refused and declined, prefetches used and wasted (counts since start), and each tenant's
pinned blocks now; a policy without pins or prefetches has none of the fields."""
from __future__ import annotations

from cache.forecast import Forecast
from cache.lru import LRUPolicy
from cache.policies.ttl_pin import TTLPinPolicy
from cache.policies.workflow_aware import WorkflowAwarePolicy
from tests.cache.test_policies_predictive import Clock, away_in_host, lognormal_forecast, manager, policy, prompt, serve

NO_PREFETCHES = {"num_prefetches": 0, "num_prefetches_used": 0, "num_prefetches_wasted": 0}


def test_predictive_counts_a_pin_set_one_refused_over_the_cap_and_each_tenants_pinned_blocks() -> None:
    """HOT holds 8 blocks, a tenant may pin half: A's 3 are pinned, C's 3 more would make
    6 (refused); tenant u's own 2 fit its own cap. A's return ends its pin: t holds 0."""
    clock = Clock()
    mgr = manager(policy(pin_cap_frac=0.5), clock, hot=8)
    assert mgr.action_counts() == {"num_pins_set": 0, "num_pins_refused": 0, **NO_PREFETCHES}
    assert mgr.pinned_blocks() == {}
    serve(mgr, clock, 0.0, "t", "fill", prompt(9, 8))  # learn the capacity (8 blocks)
    serve(mgr, clock, 1.0, "t", "A", prompt(0, 3))
    mgr.apply(lognormal_forecast("A", 1.0, median_s=5.0, sigma=0.5, p_return=1.0))
    serve(mgr, clock, 1.5, "t", "C", prompt(1, 3))
    mgr.apply(lognormal_forecast("C", 1.5, median_s=5.0, sigma=0.5, p_return=1.0))
    serve(mgr, clock, 2.0, "u", "U", prompt(2, 2))
    mgr.apply(lognormal_forecast("U", 2.0, median_s=5.0, sigma=0.5, p_return=1.0, tenant="u"))
    assert mgr.action_counts() == {"num_pins_set": 2, "num_pins_refused": 1, **NO_PREFETCHES}
    assert mgr.pinned_blocks() == {"t": 3, "u": 2}
    serve(mgr, clock, 3.0, "t", "A", prompt(0, 3))  # A is back: its wait and pin end
    assert mgr.pinned_blocks() == {"t": 0, "u": 2}
    assert mgr.action_counts()["num_pins_set"] == 2  # counts since start: an ended pin stays counted


def test_predictive_counts_prefetches_pending_then_used() -> None:
    clock = Clock()
    mgr = manager(policy(), clock, hot=4, host=8)
    away_in_host(mgr, clock)
    assert mgr.action_counts() == {"num_pins_set": 1, "num_pins_refused": 0, "num_prefetches": 3,
                                   "num_prefetches_used": 0, "num_prefetches_wasted": 0}  # 3 pending
    assert serve(mgr, clock, 11.0, "t", "A", prompt(0, 3) + [7, 7]) == (3, 0)
    assert mgr.action_counts() == {"num_pins_set": 1, "num_pins_refused": 0, "num_prefetches": 3,
                                   "num_prefetches_used": 3, "num_prefetches_wasted": 0}


def test_predictive_counts_a_prefetch_wasted_when_the_session_never_returns() -> None:
    clock = Clock()
    mgr = manager(policy(), clock, hot=4, host=8)
    away_in_host(mgr, clock)
    serve(mgr, clock, 12.0, "t", "C", prompt(2, 4))  # A never came; C needs all of HOT
    counts = mgr.action_counts()
    assert (counts["num_prefetches"], counts["num_prefetches_used"], counts["num_prefetches_wasted"]) == (3, 0, 3)


def test_kvflow_counts_prefetches_and_has_no_pins() -> None:
    clock = Clock()
    mgr = manager(WorkflowAwarePolicy(), clock, hot=4, host=8)
    serve(mgr, clock, 0.0, "t", "A", prompt(0, 3))
    mgr.apply(Forecast("t", "A", 0.0, next_step={"search": 1.0}, confident=True))
    serve(mgr, clock, 1.0, "t", "B", prompt(1, 4))
    mgr.apply(Forecast("t", "B", 1.0, next_step={"USER": 1.0}, confident=True))
    clock.now_s = 1.25
    mgr.tick(1.25)  # A, next to run, is copied back
    serve(mgr, clock, 5.0, "t", "A", prompt(0, 3) + [7, 7])
    assert mgr.action_counts() == {"num_prefetches": 3, "num_prefetches_used": 3, "num_prefetches_wasted": 0}
    assert mgr.pinned_blocks() is None


def test_ttl_counts_pins_set_and_declined_and_the_blocks_they_hold() -> None:
    """Y's 4 blocks are pinned for 2 s (LRU turnover 10 s); a slow tool's forecast is not
    worth holding (declined: the standing pin is kept). Past its deadline the pin ends."""
    clock = Clock()
    mgr = manager(TTLPinPolicy(), clock, hot=4)
    serve(mgr, clock, 0.0, "t", "X", prompt(0, 4))
    serve(mgr, clock, 10.0, "t", "Y", prompt(1, 4))
    mgr.apply(Forecast("t", "Y", 10.0, next_step={"search": 1.0}, eta_quantiles_s=((0.5, 2.0), (1.0, 100.0)),
                       confident=True))
    mgr.apply(Forecast("t", "Y", 10.0, next_step={"search": 1.0}, eta_quantiles_s=((0.5, 20.0), (1.0, 30.0)),
                       confident=True))
    assert mgr.action_counts() == {"num_pins_set": 1, "num_pins_declined": 1}
    assert mgr.pinned_blocks() == {"t": 4}
    mgr.tick(12.0)
    assert mgr.pinned_blocks() == {}


def test_lru_has_no_pins_or_prefetches_to_count() -> None:
    clock = Clock()
    mgr = manager(LRUPolicy(), clock, hot=4)
    serve(mgr, clock, 0.0, "t", "A", prompt(0, 2))
    assert mgr.action_counts() == {} and mgr.pinned_blocks() is None
