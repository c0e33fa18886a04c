"""A step that arrives while the session's previous step is still running (a fan-out,
parallel tool results sent as separate requests) could not find that step's prompt cached:
it is compared with the latest step to have ended by its arrival, live and in the store
alike, so no eviction is counted that never happened (QA170)."""
from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE, PreviousPrompt
from agents_trace.records import StepResult
from agents_trace.step_queries import list_steps
from agents_trace.store_stats import StatsWindow, tenant_stats

from tests.agents_trace.helpers import ManualClock, make_tracer

B = RECORD_BLOCK_SIZE
BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
PLAN = list(range(200))                       # step 0: 3 whole blocks and a partial one
SUBTASK_1 = list(range(300))                  # extends the plan: 3 blocks of it
SUBTASK_2 = list(range(280)) + [9_999] * 20   # extends it too, and shares 4 blocks with subtask 1


def _fan_out(tmp_path) -> tuple[list, object]:
    """The plan, then two subtasks sent at once, each finding the plan's 3 blocks cached;
    then a step after both."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    said = []

    def end(ctx, prompt, cached):
        said.append(tracer.end(ctx, StepResult(num_input_tokens=len(prompt), num_cached_tokens=cached,
                                               num_output_tokens=5, finish_reason="stop", output_text="ok",
                                               prompt_token_ids=prompt)))

    plan = tracer.begin("acme", {"x-session-id": "s"}, BODY)
    clock.advance(0.5)
    end(plan, PLAN, 0)
    clock.advance(0.5)
    first = tracer.begin("acme", {"x-session-id": "s"}, BODY)
    clock.advance(0.009)
    second = tracer.begin("acme", {"x-session-id": "s"}, BODY)
    clock.advance(0.5)
    end(first, SUBTASK_1, 3 * B)
    clock.advance(0.01)
    end(second, SUBTASK_2, 3 * B)   # subtask 1 was still running when it arrived: nothing was evicted
    clock.advance(1.0)
    after = tracer.begin("acme", {"x-session-id": "s"}, BODY)
    clock.advance(0.5)
    end(after, SUBTASK_2 + [7] * 64, 3 * B)   # sequential again: compared with subtask 2, lost a block
    tracer.stop()
    return said, tmp_path / "traces.sqlite3"


def test_the_live_count_skips_a_step_still_running_when_this_one_arrived(tmp_path):
    said, _ = _fan_out(tmp_path)
    assert said == [None, 3 * B, 3 * B, 4 * B]


def test_the_store_page_export_and_stats_skip_it_too(tmp_path):
    _, store = _fan_out(tmp_path)
    steps = list_steps(store, "acme", "s")["data"]
    assert [s["prefix_from_previous_tokens"] for s in steps] == [None, 3 * B, 3 * B, 4 * B]
    assert [s["evicted_prefix_tokens"] for s in steps] == [None, 0, 0, B]
    page = list_steps(store, "acme", "s", offset=2)["data"]   # a page starting at the overlapping step
    assert [s["evicted_prefix_tokens"] for s in page] == [0, B]
    total = tenant_stats(store, StatsWindow())["total"]
    assert (total["prefix_from_previous_tokens"], total["evicted_prefix_tokens"],
            total["steps_with_evicted_prefix"]) == (10 * B, B, 1)
    window = tenant_stats(store, StatsWindow(since_s=steps[2]["arrived_s"]))["total"]
    assert (window["steps"], window["evicted_prefix_tokens"]) == (2, B)


def test_a_step_ending_after_a_later_one_is_never_the_previous_prompt():
    previous = PreviousPrompt()
    assert previous.shared_with([1, 2], 2 * B, True, index=0, arrived_s=0.0, ended_s=1.0) is None
    previous.shared_with([1, 2, 3], 3 * B, True, index=2, arrived_s=1.2, ended_s=2.0)
    assert previous.shared_with([1, 5, 6], 3 * B, True, index=1, arrived_s=1.1, ended_s=3.0) == B   # step 0's
    assert previous.shared_with([1, 2, 3, 4], 4 * B, True, index=3, arrived_s=3.5, ended_s=4.0) == 3 * B
    assert [index for index, _, _ in previous.kept] == [0, 2, 3]   # step 1's prompt was never kept
    previous.forget_before(4.0)   # no step in flight: later ones arrive from now on
    assert len(previous.kept) == 1 and previous.kept[0][2].tolist() == [1, 2, 3, 4]


def test_a_fan_out_wider_than_the_kept_prompts_compares_every_step_with_the_prompt_before_it():
    """QA201 F1: 12 steps sent at once after step 0, ending one by one: each is compared
    with step 0's prompt (the latest ended by its arrival), the 9th to 12th too, though
    more than MAX_KEPT_PROMPTS prompts ended meanwhile."""
    from agents_trace.prompt_blocks import MAX_KEPT_PROMPTS

    previous = PreviousPrompt()
    head = [1, 2, 3]
    assert previous.shared_with(head + [4], 4 * B, True, index=0, arrived_s=0.0, ended_s=1.0) is None
    width = MAX_KEPT_PROMPTS + 4
    shared = [previous.shared_with(head + [100 + i, 7], 5 * B, True, index=1 + i, arrived_s=1.5,
                                   ended_s=2.0 + i) for i in range(width)]
    assert shared == [3 * B] * width
    assert len(previous.kept) == MAX_KEPT_PROMPTS and previous.kept[0][0] == 0   # the oldest stays
    # a step after them all is compared with the latest one ended
    assert previous.shared_with(head + [100 + width - 1, 7, 8], 6 * B, True, index=width + 1,
                                arrived_s=50.0, ended_s=51.0) == 5 * B
