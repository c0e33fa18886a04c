"""The simulator's forecast inputs: session inference and the built-in gap forecaster."""
from __future__ import annotations

import math
import random

import pytest

from cache.forecast_source import RequestSeen
from cache.gap_forecaster import OTHER_STEP, GapForecaster, GapForecasterConfig, step_of
from cache.gap_stats import LogGapStats, LogNormalGap, ReturnCounts, censored_p_return
from cache.hashing import BlockHash
from cache.session_infer import SessionInferrer


def hashes(*ids: int) -> list[BlockHash]:
    return [BlockHash(i) for i in ids]


def test_session_inferrer_follows_prefix_continuity() -> None:
    infer = SessionInferrer()
    first = infer.session_of("t", hashes(0, 1, 2))
    second = infer.session_of("t", hashes(0, 5))  # shares only the system prompt block
    assert second != first
    assert infer.session_of("t", hashes(0, 1, 2, 3, 4)) == first  # extends the frontier
    assert infer.session_of("t", hashes(0, 1, 2, 3, 4, 9)) == first
    assert infer.session_of("t", hashes(0, 5, 6)) == second
    assert infer.session_of("t", hashes(0)) not in (first, second)  # block 0 is shared
    assert infer.session_of("t", []) != infer.session_of("t", [])
    assert infer.num_sessions == 5


def test_session_inferrer_memory_is_bounded() -> None:
    infer = SessionInferrer(max_tracked_blocks=10)
    for i in range(100):
        infer.session_of("t", hashes(10 * i, 10 * i + 1, 10 * i + 2))
    assert len(infer._owner) <= 10  # noqa: SLF001 - the bound is the point


def test_log_gap_stats_shrink_towards_the_parent() -> None:
    stats = LogGapStats()
    for _ in range(30):
        stats.add(math.e ** 2)
    parent = LogNormalGap(0.0, 1.0)
    assert stats.shrunk(parent, 3.0).mu == pytest.approx(60 / 33)
    assert LogGapStats().shrunk(parent, 3.0) == parent


def test_censored_p_return_counts_long_pending_waits_as_likely_ends() -> None:
    counts = ReturnCounts(num_returned=10, num_ended=0)
    naive = counts.shrunk(0.5, 1.0)
    # ten waits pending well past the time a returner would have come back
    assert censored_p_return(counts, [0.99] * 10, 0.5, 1.0) < 0.6 < naive
    # ten waits that only just started say nothing either way
    assert censored_p_return(counts, [0.0] * 10, 0.5, 1.0) == pytest.approx(naive, abs=0.05)


def feed(forecaster: GapForecaster, rng: random.Random, num_sessions: int) -> None:
    """Sessions of one tenant: a fast tool (median 2 s) then a slow user (median 40 s);
    half the sessions end after the user turn."""
    events = []
    for i in range(num_sessions):
        t = 100.0 * i
        events.append((t, i, ("fast",)))
        t += rng.lognormvariate(math.log(2.0), 0.3)
        events.append((t, i, ()))
        if i % 2 == 0:
            events.append((t + rng.lognormvariate(math.log(40.0), 0.3), i, ()))
    for t, i, tools in sorted(events):
        forecaster.observe(RequestSeen("t", f"s{i}", t, tool_calls=tools, num_blocks=4))


def test_gap_forecaster_learns_gaps_per_step_and_return_odds() -> None:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=8))
    feed(forecaster, random.Random(0), 200)
    assert forecaster.gap_distribution("t", step_of(("fast",))).median_s == pytest.approx(2.0, rel=0.2)
    assert forecaster.gap_distribution("t", "user").median_s == pytest.approx(40.0, rel=0.2)
    forecaster.observe(RequestSeen("t", "new", 30_000.0, tool_calls=("fast",), num_blocks=4))
    tool = forecaster.forecast("t", "new", 30_000.0)
    assert tool.confident and tool.p_end < 0.1 and tool.eta_s(0.5) == pytest.approx(2.0, rel=0.3)
    assert tool.next_step["fast"] == pytest.approx(1.0 - tool.p_end)
    forecaster.observe(RequestSeen("t", "new", 30_002.0, num_blocks=4))
    user = forecaster.forecast("t", "new", 30_002.0)
    assert 0.3 < user.p_end < 0.7  # half the user turns never come
    assert forecaster.forecast("t", "unknown", 30_002.0) is None


def test_gap_forecaster_is_not_confident_before_enough_outcomes() -> None:
    forecaster = GapForecaster()
    forecaster.observe(RequestSeen("t", "s", 0.0))
    assert not forecaster.forecast("t", "s", 0.0).confident


def feed_turns(forecaster: GapForecaster, num_sessions: int, labelled: bool) -> None:
    """Sessions of one tenant that answer in text four times and always end after the
    fourth answer: after each earlier one the user comes back 20 s later."""
    for i in range(num_sessions):
        for turn in range(4):
            after = ("start" if turn == 0 else "user") if labelled else None
            forecaster.observe(RequestSeen("t", f"s{i}", 100.0 * i + 20.0 * turn, after=after, num_blocks=8))


@pytest.mark.parametrize("labelled", [True, False])
def test_gap_forecaster_learns_that_sessions_end_after_their_last_turn(labelled: bool) -> None:
    with_answers = GapForecaster(GapForecasterConfig(recount_every=8, use_prompt_size=False))
    without = GapForecaster(GapForecasterConfig(recount_every=8, use_prompt_size=False, answers_cap=0))
    p_end = {}
    for name, forecaster in (("with", with_answers), ("without", without)):
        feed_turns(forecaster, 60, labelled)
        # a new session after its third and then its fourth answer: depths 2 and 3 share
        # a log2 bucket, so only the count of answers tells them apart
        for turn in range(4):
            after = ("start" if turn == 0 else "user") if labelled else None
            t = 10_000.0 + 20.0 * turn
            forecaster.observe(RequestSeen("t", "new", t, after=after, num_blocks=8))
            p_end[name, turn + 1] = forecaster.forecast("t", "new", t).p_end
    assert p_end["without", 3] == pytest.approx(p_end["without", 4])
    if labelled:
        assert p_end["with", 3] < 0.2 and p_end["with", 4] > 0.8
    else:  # an unlabelled trace has no turns to count: the feature stays out
        assert p_end["with", 3] == pytest.approx(p_end["without", 3])
        assert p_end["with", 4] == pytest.approx(p_end["without", 4])


def _censored_p_return_by_loop(counts: ReturnCounts, pending_done: list[float], parent_p: float,
                               strength: float, num_iter: int = 6) -> float:
    """The EM written out one wait at a time: the reference for the vectorized one."""
    p = counts.shrunk(parent_p, strength)
    total = counts.num_resolved + len(pending_done) + strength
    base = counts.num_returned + strength * parent_p
    for _ in range(num_iter):
        still = sum(p * (1.0 - done) / (1.0 - p * done) for done in pending_done if 1.0 - p * done > 1e-12)
        p = (base + still) / total
    return min(1.0, max(0.0, p))


def test_censored_p_return_matches_the_one_wait_at_a_time_em() -> None:
    rng = random.Random(4)
    for _ in range(50):
        counts = ReturnCounts(num_returned=rng.randint(0, 30), num_ended=rng.randint(0, 30))
        pending = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(rng.randint(0, 40))]
        parent_p, strength = rng.random(), rng.choice([1.0, 10.0])
        assert censored_p_return(counts, pending, parent_p, strength) == pytest.approx(
            _censored_p_return_by_loop(counts, pending, parent_p, strength), abs=1e-12)
    # every returner would be back by now, p = 1: no wait is counted, none divides by zero
    assert censored_p_return(ReturnCounts(5, 0), [1.0] * 3, 1.0, 0.0) == pytest.approx(5 / 8)


def test_forget_counts_a_pending_wait_as_ended_and_starts_the_session_afresh() -> None:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=1))
    forecaster.observe(RequestSeen("t", "s", 0.0, after="start", num_blocks=4))
    forecaster.observe(RequestSeen("t", "s", 5.0, after="user", num_blocks=4))
    before = forecaster.learned().returns[("t",)]
    assert (before.num_returned, before.num_ended) == (1.0, 0.0)
    forecaster.forget("t", "s")
    assert forecaster.learned().returns[("t",)].num_ended == 1.0 and forecaster.forecast("t", "s", 6.0) is None
    forecaster.forget("t", "s")   # twice, or an unknown session: nothing more
    forecaster.forget("t", "never")
    assert forecaster.learned().returns[("t",)].num_ended == 1.0
    forecaster.observe(RequestSeen("t", "s", 600.0, after="user", num_blocks=4))
    assert forecaster._waiting[("t", "s")].depth == 0   # a new start, not a return
    assert forecaster.learned().returns[("t",)].num_returned == 1.0


def test_a_tenants_distinct_waits_are_bounded_and_the_rest_pool() -> None:
    forecaster = GapForecaster(GapForecasterConfig(max_steps_per_tenant=3))
    for i, tools in enumerate([(), ("a",), ("b",), ("c",), ("d",), ("a",)]):
        forecaster.observe(RequestSeen("t", f"s{i}", float(i), after="start", tool_calls=tools))
    steps = [forecaster._waiting[("t", f"s{i}")].step for i in range(6)]
    assert steps == ["user", "tool:a", "tool:b", OTHER_STEP, OTHER_STEP, "tool:a"]
    assert set(forecaster.forecast("t", "s4", 5.0).next_step) == {"<oov>", "END"}
    forecaster.observe(RequestSeen("u", "s0", 6.0, after="start", tool_calls=("d",)))
    assert forecaster._waiting[("u", "s0")].step == "tool:d"   # another tenant's own bound
