"""Known answers for the order in which a worker's admitted prefills run."""
import pytest

from shards.prefill_order import INITIAL_S_PER_TOKEN, SMOOTHING, PrefillOrder


def key(order, *, past_share=False, slots=1.0, admitted_s=0.0, remaining=100, index=0):
    return order.key(past_share=past_share, slots_per_weight=slots, admitted_s=admitted_s,
                     num_remaining_tokens=remaining, arrival_index=index)


def test_deadline_runs_the_shortest_remaining_prefill_first():
    order = PrefillOrder(s_per_token=0.001)
    cold = key(order, remaining=3000, index=0)   # admitted first, 3 s of prefill left
    warm = key(order, remaining=200, index=1)    # a cached agent step, 0.2 s left
    assert min(cold, warm) == warm


def test_deadline_ages_a_long_prefill_past_later_short_ones():
    order = PrefillOrder(s_per_token=0.001)
    long_one = key(order, admitted_s=0.0, remaining=3000, index=0)      # deadline 3.0
    late_short = key(order, admitted_s=2.9, remaining=200, index=1)     # deadline 3.1
    assert min(long_one, late_short) == long_one


def test_deadline_stretches_the_work_of_a_tenant_holding_more_slots():
    order = PrefillOrder(s_per_token=0.001)
    burst = key(order, slots=4.0, admitted_s=0.0, remaining=400, index=0)   # deadline 1.6
    quiet = key(order, slots=1.0, admitted_s=0.5, remaining=400, index=1)   # deadline 0.9
    assert min(burst, quiet) == quiet
    assert min(burst, key(order, slots=1.0, admitted_s=0.5, remaining=1200, index=1)) == burst


def test_a_tenant_past_its_share_comes_last_in_either_order():
    for kind in ("deadline", "arrival"):
        order = PrefillOrder(kind)
        assert key(order, past_share=False, remaining=5000, slots=9, index=9) < key(
            order, past_share=True, remaining=1, slots=0, index=0)


def test_arrival_is_fewest_slots_for_weight_then_oldest():
    order = PrefillOrder("arrival")
    assert key(order, slots=0.5, remaining=9000, index=5) < key(order, slots=1.0, remaining=1, index=0)
    assert key(order, slots=1.0, remaining=9000, index=0) < key(order, slots=1.0, remaining=1, index=1)


def test_the_rate_follows_measured_chunks():
    order = PrefillOrder()
    order.observe(128, 0.128 * 3)  # 3 ms per token
    assert order.s_per_token == pytest.approx(INITIAL_S_PER_TOKEN + SMOOTHING * (0.003 - INITIAL_S_PER_TOKEN))
    order.observe(0, 1.0)  # nothing computed: ignored
    before = order.s_per_token
    order.observe(64, 0.0)
    assert order.s_per_token == before


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="prefill_order"):
        PrefillOrder("random")
