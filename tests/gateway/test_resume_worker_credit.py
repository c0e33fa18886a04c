"""A stream resumed mid-reply on another worker (its first worker died) is credited to the
workers that did its work: the first one's prompt, cached prefix and TTFT; each one's
generated tokens; the finishing one's success."""
from __future__ import annotations

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Finished, Prepared
from gateway.local_generation import LocalCall, run_free
from gateway.metrics import Registry
from gateway.worker_runs import WorkerRun, WorkerRuns

PROMPT = list(range(40))


class ResumedEngine:
    """w1 prefills (32 cached), sends 3 tokens and dies; w0 goes on from there and sends 2,
    then finishes: its finish counts all 5, and the 32 cached tokens w1 found (as the
    dispatcher sets them), but names w0 and its own time to its first token here."""

    max_context_tokens = 1000

    async def generate(self, item):
        yield TokenEvent(item.request_id, [1], "a", num_cached_tokens=32, worker_id="w1")
        yield TokenEvent(item.request_id, [2, 3], "bc")
        yield TokenEvent(item.request_id, [4], "d", num_cached_tokens=0, worker_id="w0")   # resumed on w0
        yield TokenEvent(item.request_id, [5], "e")
        yield FinishEvent(item.request_id, "length", len(PROMPT), 32, 5, 0.5, "w0")


class OneWorkerEngine:
    """The same reply on one worker, w1, from start to finish."""

    max_context_tokens = 1000

    async def generate(self, item):
        yield TokenEvent(item.request_id, [1], "a", num_cached_tokens=32, worker_id="w1")
        yield TokenEvent(item.request_id, [2, 3], "bc")
        yield FinishEvent(item.request_id, "length", len(PROMPT), 32, 3, 0.5, "w1")


async def _finished(engine) -> Finished:
    call = LocalCall(PROMPT, SamplingParams(max_tokens=5), "s", None, None, False)
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + 5, call)
    events = [event async for event in run_free(engine, prepared, call)]
    return events[-1]


async def test_a_resumed_streams_finish_names_its_first_worker_and_that_workers_ttft():
    finished = await _finished(ResumedEngine())
    assert finished.worker == "w1"   # it prefilled, found the 32 cached tokens, sent the first token
    assert (finished.usage.num_cached_tokens, finished.usage.num_completion_tokens) == (32, 5)
    assert finished.ttft_s is not None and finished.ttft_s < 0.5   # read here from w1's first token, not w0's 0.5 s
    assert finished.worker_runs == (WorkerRun("w1", 3), WorkerRun("w0", 2))   # what /metrics splits


def test_worker_runs_split_the_generated_tokens_by_the_worker_that_made_them():
    runs = WorkerRuns()
    assert runs.first_worker is None and runs.resumed(0) == ()
    runs.on_tokens("w1", 1)
    runs.on_tokens(None, 2)
    assert runs.resumed(3) == ()   # one worker: nothing to split
    runs.on_tokens("w0", 1)
    runs.on_tokens(None, 1)
    assert runs.first_worker == "w1"
    # the last run takes the rest of what the finish counted (a schema repair's tokens, say)
    assert runs.resumed(7) == (WorkerRun("w1", 3), WorkerRun("w0", 4))


def test_metrics_credit_a_resumed_request_to_the_workers_that_did_each_part():
    registry = Registry()
    registry.record_finish(tenant="a", model="m", worker="w1", finish_reason="length", num_prompt_tokens=40,
                           num_cached_tokens=32, num_output_tokens=5, ttft_s=0.02,
                           runs=(WorkerRun("w1", 3), WorkerRun("w0", 2)))
    on = {worker: (("tenant", "a"), ("model_name", "m"), ("worker", worker)) for worker in ("w0", "w1")}
    counters = registry.counters
    assert counters[("vllm:prompt_tokens_total", on["w1"])] == 40 and ("vllm:prompt_tokens_total", on["w0"]) not in counters
    assert counters[("vllm:prefix_cache_hits_total", on["w1"])] == 32
    assert counters[("vllm:prefix_cache_queries_total", on["w1"])] == 40
    assert counters[("vllm:generation_tokens_total", on["w1"])] == 3
    assert counters[("vllm:generation_tokens_total", on["w0"])] == 2
    success = ("vllm:request_success_total", on["w0"] + (("finished_reason", "length"),))
    assert counters == {**counters, success: 1.0} and len([k for k in counters if k[0] == success[0]]) == 1
    ttft = registry.histograms
    assert list(ttft) == [("vllm:time_to_first_token_seconds", on["w1"] + (("service_tier", "default"),))]


def test_a_request_on_one_worker_is_counted_as_before():
    registry = Registry()
    registry.record_finish(tenant="a", model="m", worker="w0", finish_reason="stop", num_prompt_tokens=10,
                           num_cached_tokens=0, num_output_tokens=4, ttft_s=None)
    labels = (("tenant", "a"), ("model_name", "m"), ("worker", "w0"))
    assert registry.counters[("vllm:generation_tokens_total", labels)] == 4
    assert registry.counters[("vllm:request_success_total", labels + (("finished_reason", "stop"),))] == 1


async def test_the_merged_reply_keeps_the_workers_each_choice_ran_on():
    """QA166: every reply's usage is merged from its choices (`merged_usage`, `n` = 1 too),
    which dropped `worker_runs`: /metrics credited all of a resumed stream to its first worker."""
    import dataclasses

    from gateway.backend import Usage
    from gateway.choices import merged_usage

    resumed = await _finished(ResumedEngine())
    assert merged_usage([resumed]).worker_runs == (WorkerRun("w1", 3), WorkerRun("w0", 2))
    other = dataclasses.replace(Finished("stop", Usage(len(PROMPT), 4, 32), worker="w1"), choice=1)
    assert merged_usage([other, resumed]).worker_runs == (WorkerRun("w1", 3), WorkerRun("w0", 2), WorkerRun("w1", 4))
    assert merged_usage([other]).worker_runs == ()   # none resumed: one worker's, as before


async def test_a_resumed_reply_cut_short_credits_each_worker_its_tokens():
    """QA169: a resumed stream whose client then left (or whose second worker died too)
    credited every token it generated to the first worker: the cut path knew one worker."""
    call = LocalCall(PROMPT, SamplingParams(max_tokens=5), "s", None, None, False)
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + 5, call)
    events = run_free(ResumedEngine(), prepared, call)
    for _ in range(3):   # 'a', 'bc' from w1, 'd' from w0: then the client leaves
        await anext(events)
    await events.aclose()
    runs = prepared.generated.resumed_runs()
    assert runs == (WorkerRun("w1", 3), WorkerRun("w0", 1))
    registry = Registry()
    registry.record_tokens(tenant="t", model="m", worker="w1", num_prompt_tokens=40, num_cached_tokens=32,
                           num_output_tokens=6, ttft_s=0.1, runs=runs)   # 6: 2 generated unread, on the last
    text = registry.render(tenant="t")
    assert 'vllm:generation_tokens_total{tenant="t",model_name="m",worker="w1"} 3' in text
    assert 'vllm:generation_tokens_total{tenant="t",model_name="m",worker="w0"} 3' in text
    assert 'vllm:prompt_tokens_total{tenant="t",model_name="m",worker="w1"} 40' in text
    assert "request_success" not in text
    single = Prepared("req2", "t", "m", len(PROMPT), len(PROMPT) + 5, call)
    assert [event async for event in run_free(OneWorkerEngine(), single, call)] and single.generated.resumed_runs() == ()
