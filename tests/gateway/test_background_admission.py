"""How a background response waits to be let in (`background_responses._admitted`,
`_begun`): refusals that waiting cures — the tenant's limits, and the model's own queue for
the tenant being full — are asked again after `Retry-After`, the request prepared again for
the limits; only the refusal that ends the wait counts as the tenant's refusal."""
import asyncio
import threading

import pytest

from gateway import background_responses
from gateway.background_responses import BackgroundJob, _admitted, _begun
from gateway.engine_streams import ModelQueueFull
from gateway.errors import rate_limited, unavailable


class Metrics:
    def __init__(self):
        self.rejections = []

    def record_rejection(self, tenant, code):
        self.rejections.append((tenant, code))


class Prepared:
    def __init__(self, name):
        self.name, self.tenant, self.num_choices = name, "alpha", 1


class State:
    def __init__(self):
        self.metrics = Metrics()


class Exchange:
    """`acquire` refuses the first `num_refusals` tries; `next_event` reads the events."""

    def __init__(self, prepared, num_refusals=0):
        self.state, self.prepared, self.tries, self.num_refusals = State(), prepared, [], num_refusals

    async def acquire(self, count_refusal=True):
        assert count_refusal is False   # the run counts the refusal that ends its wait itself
        self.tries.append(self.prepared.name)
        if len(self.tries) <= self.num_refusals:
            raise rate_limited("budget held by requests in flight", 1)

    async def next_event(self, events):
        return await anext(events)


def _queue_full():
    return ModelQueueFull.of(rate_limited("The model's queue for this tenant is full", 1))


def _all_workers_busy():
    return unavailable("The model is unavailable: no worker could take the request in time", code="overloaded")


class QueueFullBackend:
    """The model refuses the first `num_refusals` runs with `refusal()` (by default: its
    queue for the tenant is full)."""

    def __init__(self, num_refusals, refusal=_queue_full):
        self.num_refusals, self.refusal, self.runs, self.closed = num_refusals, refusal, 0, 0

    async def _events(self):
        try:
            self.runs += 1
            if self.runs <= self.num_refusals:
                raise self.refusal()
            yield "first token"
            yield "second token"
        finally:
            self.closed += 1

    def run(self, prepared):
        return self._events()


def _job(backend=None, prepare_again=None):
    return BackgroundJob(None, backend, Prepared("as first prepared"), None, None, 0.0, None, prepare_again)


def _run(coroutine_of_deadline):
    async def main():
        return await coroutine_of_deadline(asyncio.get_running_loop().time() + 300)
    return asyncio.run(main())


def _no_wait(monkeypatch):
    """`asyncio.sleep` (the module background_responses uses is asyncio itself) returns at
    once in this thread, recording how long it was asked for; other threads of this process
    (another test's server, CI saw 655 sleeps of 0.1 s recorded) sleep as before."""
    waits = []
    real_sleep, this_thread = asyncio.sleep, threading.get_ident()

    async def recorded(seconds, *args, **kwargs):
        if threading.get_ident() != this_thread:
            return await real_sleep(seconds, *args, **kwargs)
        waits.append(seconds)

    monkeypatch.setattr(background_responses.asyncio, "sleep", recorded)
    return waits


def test_a_run_that_waited_is_prepared_again_before_it_asks_again(monkeypatch):
    """QA102: a run refused while its tenant's budget was held by requests in flight kept
    the share it was prepared with then (1 token) and ended `incomplete` once admitted;
    each new try now takes a fresh preparation (`prepare_again`), and the refusals it
    waited out are not counted as the tenant's."""
    waits = _no_wait(monkeypatch)

    async def prepare_again():
        return Prepared("prepared with the room there is now")

    job = _job(prepare_again=prepare_again)
    exchange = Exchange(job.prepared, num_refusals=1)
    _run(lambda deadline_s: _admitted(job, exchange, deadline_s))
    assert exchange.tries == ["as first prepared", "prepared with the room there is now"]
    assert job.prepared is exchange.prepared and job.prepared.name == "prepared with the room there is now"
    assert waits == [1.0] and exchange.state.metrics.rejections == []


def test_a_refusal_past_the_wait_is_raised_and_counted_once(monkeypatch):
    _no_wait(monkeypatch)
    job = _job()
    exchange = Exchange(job.prepared, num_refusals=10)

    async def admitted_or_refused(deadline_s):
        try:
            await _admitted(job, exchange, asyncio.get_running_loop().time() + 0.5)   # shorter than Retry-After
        except Exception as error:
            return error

    error = _run(admitted_or_refused)
    assert error.status == 429 and exchange.tries == ["as first prepared"]
    assert exchange.state.metrics.rejections == [("alpha", "rate_limit_exceeded")]


@pytest.mark.parametrize("refusal", [_queue_full, _all_workers_busy])
def test_the_models_full_queue_is_waited_out_and_the_run_begins_once_it_has_room(monkeypatch, refusal):
    """QA102: a background response refused by the model's own queue for its tenant (a 429
    after the limits admitted it), or by its workers all busy (a 503 `overloaded`), failed
    at once; it now waits as `Retry-After` says and runs, each refused run closed."""
    waits = _no_wait(monkeypatch)
    backend = QueueFullBackend(num_refusals=2, refusal=refusal)
    job = _job(backend)
    exchange = Exchange(job.prepared)

    async def first_two(deadline_s):
        events, first = await _begun(job, exchange, deadline_s)
        return first, await anext(events), backend.closed

    assert _run(first_two) == ("first token", "second token", 2)   # the two refused runs closed
    assert backend.runs == 3 and waits == [1.0, 1.0]
    assert exchange.state.metrics.rejections == []


def test_the_models_full_queue_past_the_wait_fails_the_run_with_its_refusal(monkeypatch):
    _no_wait(monkeypatch)
    backend = QueueFullBackend(num_refusals=10)
    job = _job(backend)
    exchange = Exchange(job.prepared)

    async def begun_or_refused(deadline_s):
        try:
            await _begun(job, exchange, asyncio.get_running_loop().time() + 0.5)
        except ModelQueueFull as error:
            return error

    error = _run(begun_or_refused)
    assert error.status == 429 and "queue for this tenant is full" in error.message
    assert backend.runs == 1 and backend.closed == 1
    assert exchange.state.metrics.rejections == [("alpha", "rate_limit_exceeded")]


def test_all_workers_busy_past_the_wait_fails_the_run_and_is_no_refusal_of_the_tenant(monkeypatch):
    _no_wait(monkeypatch)
    backend = QueueFullBackend(num_refusals=10, refusal=_all_workers_busy)
    job = _job(backend)
    exchange = Exchange(job.prepared)

    async def begun_or_refused(deadline_s):
        try:
            await _begun(job, exchange, asyncio.get_running_loop().time() + 0.5)
        except Exception as error:
            return error

    error = _run(begun_or_refused)
    assert (error.status, error.code) == (503, "overloaded") and backend.runs == 1
    assert exchange.state.metrics.rejections == []
