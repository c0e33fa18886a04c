"""A local model's `n` > 1 request is admitted by the engine queue as a unit: refused
(429) before any event when its choices do not all fit, never after choice 0 streamed."""
import pytest

from shards.dispatcher import DispatchConfig, Dispatcher
from shards.protocol import ErrorEvent, FinishEvent, SamplingParams, TokenEvent, WorkItem
from shards.route_records import RouterConfig
from shards.router import Router

from gateway.backend import Finished, Prepared, TextDelta
from gateway.choices import run_choices
from gateway.errors import ApiError
from gateway.local_generation import LocalCall, run_free

PROMPT = [1, 2, 3]


class QueueEngine:
    """Admission by a real dispatcher (no workers: whatever it admits stays queued), the
    replies scripted: "ab". Before the first token of the request's first run, the
    tenant's other requests fill its queue to the bound."""

    max_context_tokens = 1000

    def __init__(self, num_queued_before: int, bound: int = 4):
        self.dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig(max_queued_per_tenant=bound))
        self.bound = bound
        for index in range(num_queued_before):
            self._submit(WorkItem(f"other{index}", "t", PROMPT, SamplingParams()))

    def _submit(self, item: WorkItem) -> list[ErrorEvent]:
        out = self.dispatcher.submit(item, [], 0.0, room=item.queue_room)
        return [e for e in out.deliveries if isinstance(e, ErrorEvent)]

    async def generate(self, item: WorkItem):
        refusals = self._submit(item)
        if refusals:
            yield refusals[0]
            return
        if item.request_id.endswith("-0"):
            while self.dispatcher.queue.num_queued("t") < self.bound:
                self._submit(WorkItem(f"other{len(self.dispatcher.requests)}", "t", PROMPT, SamplingParams()))
        for index, char in enumerate("ab"):
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=0 if index == 0 else None)
        yield FinishEvent(item.request_id, "stop", len(PROMPT), 0, 2, 0.01, "w0")


class FreeBackend:
    model_id, owned_by = "m", "test"

    def __init__(self, engine):
        self.engine = engine

    def run(self, prepared: Prepared):
        return run_free(self.engine, prepared, prepared.payload)


def _prepared(num_choices: int) -> Prepared:
    call = LocalCall(PROMPT, SamplingParams(max_tokens=8), None, None, None, False)
    return Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + 8, call, num_choices=num_choices)


async def test_the_later_choices_of_an_admitted_request_are_not_refused_by_a_queue_filled_meanwhile():
    engine = QueueEngine(num_queued_before=0)
    events = [event async for event in run_choices(FreeBackend(engine), _prepared(3))]
    finished = [e for e in events if isinstance(e, Finished)]
    assert sorted(e.choice for e in finished) == [0, 1, 2]
    assert "".join(e.text for e in events if isinstance(e, TextDelta) and e.choice == 2) == "ab"
    assert engine.dispatcher.stats.num_rejected == {}


async def test_a_request_whose_choices_do_not_all_fit_is_refused_before_any_event():
    engine = QueueEngine(num_queued_before=2)
    events = run_choices(FreeBackend(engine), _prepared(3))
    with pytest.raises(ApiError) as refused:
        await events.__anext__()
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    await events.aclose()
    assert list(engine.dispatcher.requests) == ["other0", "other1"]
