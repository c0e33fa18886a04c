"""WorkflowAwarePolicy (KVFlow-style) on hand-drawn layouts."""
from __future__ import annotations

import pytest

from cache.forecast import Forecast
from cache.lru import LRUPolicy
from cache.policies import make_policy
from cache.policies.workflow_aware import LATER, NEVER, NEXT, WorkflowAwarePolicy, step_class
from cache.tiers import Tier
from tests.cache.test_policies_predictive import Clock, manager, prompt, serve, tiers_of


def tool_next(session: str, t_s: float) -> Forecast:
    return Forecast("t", session, t_s, next_step={"search": 1.0}, confident=True)


def user_next(session: str, t_s: float, p_end: float = 0.0) -> Forecast:
    return Forecast("t", session, t_s, next_step={"USER": 1.0 - p_end, "END": p_end}, p_end=p_end,
                    confident=True)


def test_step_classes() -> None:
    assert step_class(tool_next("A", 0.0)) == NEXT
    assert step_class(user_next("A", 0.0)) == LATER
    assert step_class(user_next("A", 0.0, p_end=0.9)) == NEVER


def test_kvflow_evicts_the_farthest_from_execution_first() -> None:
    """A (oldest) waits on a tool, B on a user, C most likely ended. A request needing
    four slots takes C's, then B's; LRU would take A's and B's."""
    for policy in (LRUPolicy(), WorkflowAwarePolicy()):
        clock = Clock()
        mgr = manager(policy, clock, hot=6)
        for t_s, session, forecast in ((0.0, "A", tool_next), (1.0, "B", user_next),
                                       (2.0, "C", lambda s, t: user_next(s, t, p_end=0.9))):
            serve(mgr, clock, t_s, "t", session, prompt(ord(session), 2))
            mgr.apply(forecast(session, t_s))
        serve(mgr, clock, 3.0, "t", "D", prompt(1, 4))
        kept = [tiers_of(mgr, "t", prompt(ord(s), 2)) == [Tier.HOT] * 2 for s in "ABC"]
        assert kept == ([False, False, True] if isinstance(policy, LRUPolicy) else [True, False, False])


def test_kvflow_shared_prefix_is_as_near_as_its_nearest_user() -> None:
    """A and B share their first block; B waits on a tool, A on a user. Under pressure
    A's own block goes, the shared one stays with B's."""
    clock = Clock()
    policy = WorkflowAwarePolicy()
    mgr = manager(policy, clock, hot=4)
    shared = [5, 5]
    serve(mgr, clock, 0.0, "t", "B", shared + [6, 6])
    mgr.apply(tool_next("B", 0.0))
    serve(mgr, clock, 1.0, "t", "A", shared + [7, 7])
    mgr.apply(user_next("A", 1.0))
    serve(mgr, clock, 2.0, "t", "D", [8, 8, 9, 9])  # one free slot, one to take
    assert tiers_of(mgr, "t", shared + [6, 6]) == [Tier.HOT, Tier.HOT]
    assert tiers_of(mgr, "t", shared + [7, 7]) == [Tier.HOT, None]


def test_kvflow_prefetches_the_next_step_back_to_hot() -> None:
    """A waits on a tool; B's larger request pushes A to HOST. At the next tick A is
    copied back (B, waiting on a user, gives up the room) and its return hits HOT."""
    clock = Clock()
    policy = WorkflowAwarePolicy()
    mgr = manager(policy, clock, hot=4, host=8)
    a = prompt(0, 3)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(tool_next("A", 0.0))
    serve(mgr, clock, 1.0, "t", "B", prompt(1, 4))
    mgr.apply(user_next("B", 1.0))
    assert tiers_of(mgr, "t", a) == [Tier.HOST] * 3
    clock.now_s = 1.25
    mgr.tick(1.25)
    assert tiers_of(mgr, "t", a) == [Tier.HOT] * 3
    assert serve(mgr, clock, 5.0, "t", "A", a + [7, 7]) == (3, 0)
    counts = policy.prefetch_counts()
    assert (counts.num_prefetched, counts.num_used, counts.num_wasted) == (3, 3, 0)


def test_kvflow_does_not_prefetch_over_blocks_as_near() -> None:
    """HOT holds only another NEXT session: A stays in HOST."""
    clock = Clock()
    mgr = manager(WorkflowAwarePolicy(), clock, hot=4, host=8)
    a = prompt(0, 3)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(tool_next("A", 0.0))
    serve(mgr, clock, 1.0, "t", "B", prompt(1, 4))
    mgr.apply(tool_next("B", 1.0))
    mgr.tick(1.25)
    assert tiers_of(mgr, "t", a) == [Tier.HOST] * 3


def test_kvflow_takes_no_options() -> None:
    assert isinstance(make_policy("kvflow"), WorkflowAwarePolicy)
    with pytest.raises(ValueError, match="kvflow"):
        make_policy("kvflow", horizon_s=3)
