"""A request's `n` choices: one backend run per choice, merged into one event stream.

Invariants:
- with `n` = 1 the backend's own stream is returned untouched;
- every event of the merged stream carries its choice's index in `choice`, and the
  stream ends after the last choice's `Finished` (each choice's own `Finished` passes
  through, so a writer can close that choice);
- on a local engine choice 0 starts first and the others once it has sent its first event:
  by then the engine holds the prompt in its prefix cache, so the prompt is prefilled once,
  not n times (with several prompts, the same per prompt, their first choices at once); a
  backend that `starts_choices_at_once` (an upstream model: each choice is a call of its
  own, which nothing could share) starts them all at once, so `n` > 1 costs no more latency
  than one choice;
- a local engine admits each prompt's choices as a unit (`queue_room`): its first choice
  is queued only with room for them all, the later ones go past the engine queue's bounds,
  so a refusal (429) comes before any of the request's events, never after choice 0 began;
- an error in any choice ends the merged stream with that error, and closing the merged
  stream (or an error) stops every choice's backend work;
- at most `MERGED_EVENTS_PER_RUN` events per run wait in the merged stream: past that its
  runs stop reading their backend streams until the reader takes some, so a reader that
  stops reading leaves the tokens unread where a local engine counts and bounds them
  (shards/engine_streams.py cuts a request past its unread bound, as with `n` = 1);
- a local model's request reserves each prompt once and every choice's completion budget,
  and its usage counts each prompt once; an upstream model's choices are upstream calls of
  their own, each billed the whole prompt, so its request reserves, and its usage counts,
  the prompt (and its cached tokens) of every choice: the usage the client gets, the
  tenant's charge, the trace and the metrics are what the upstream billed;
- an upstream model's completions `best_of` candidates are generated (and ranked) inside
  each upstream call: its `Prepared.best_of` stays 1, so nothing here runs or ranks them,
  and each call's reservation holds every candidate's completion budget already
  (gateway/upstream.py), which `with_choices` multiplies by `n` like any other.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from gateway.backend import Backend, ChatEvent, Finished, Prepared, Usage
from gateway.worker_runs import WorkerRun

MERGED_EVENTS_PER_RUN = 32   # a run's events that may wait for the reader before it stops reading


def with_choices(prepared: Prepared, num_choices: int | None) -> Prepared:
    """The request asking for `num_choices` (None: 1) per prompt and running max(that,
    its `best_of`) candidates per prompt, its reservation grown to pay for every
    candidate's completion budget."""
    num_returned = num_choices or 1
    num_runs = max(num_returned, prepared.best_of) * prepared.num_prompts
    if num_runs == 1:
        return prepared
    budget = prepared.num_reserved_tokens - prepared.num_prompt_tokens
    num_prompt_payments = num_runs if runs_pay_own_prompt(prepared) else 1
    return dataclasses.replace(prepared, num_choices=num_runs, num_returned=num_returned,
                               num_reserved_tokens=prepared.num_prompt_tokens * num_prompt_payments
                               + budget * num_runs)


def runs_pay_own_prompt(prepared: Prepared) -> bool:
    """Each of the request's runs is an upstream call of its own, billed its whole prompt:
    an upstream model's request (the one kind whose prompt count is an estimate); a local
    model's runs share each prompt's one prefill."""
    return not prepared.prompt_is_counted


def merged_usage(finishes: list[Finished], num_prompts: int = 1) -> Finished:
    """One `Finished` for the whole request, from every choice's (in any order, all of
    them): choice 0's reason, worker, system fingerprint and service tier, each prompt
    counted once (its prompt and cached tokens from the first choice of its group, as
    OpenAI counts it) except that a choice that paid its own prompt (`pays_own_prompt`: an
    upstream call of its own) counts its prompt too, every choice's completion tokens (and
    their breakdown)."""
    first = min(finishes, key=lambda finished: finished.choice)
    group = max(1, len(finishes) // num_prompts)
    paying = [f for f in finishes if f.choice % group == 0 or f.pays_own_prompt]
    usage = Usage(num_prompt_tokens=sum(f.usage.num_prompt_tokens for f in paying),
                  num_completion_tokens=sum(f.usage.num_completion_tokens for f in finishes),
                  num_cached_tokens=sum(f.usage.num_cached_tokens for f in paying),
                  completion_tokens_details=_summed_details(finishes),
                  num_cache_write_tokens=_summed_writes(paying))
    return Finished(first.finish_reason, usage, first.worker, first.ttft_s,
                    system_fingerprint=first.system_fingerprint, service_tier=first.service_tier,
                    worker_runs=_merged_runs(finishes))


def _merged_runs(finishes: list[Finished]) -> tuple[WorkerRun, ...]:
    """The workers the request's choices ran on, choice by choice, when one of them was
    resumed mid-stream on another worker (its `worker_runs`; the others one run each, their
    completion tokens), so its metrics credit each worker its tokens (QA166: every merged
    reply, `n` = 1 too, dropped them); () when none was."""
    if not any(finished.worker_runs for finished in finishes):
        return ()
    return tuple(run for finished in sorted(finishes, key=lambda f: f.choice)
                 for run in finished.worker_runs or (
                     WorkerRun(finished.worker or "local", finished.usage.num_completion_tokens),))


def _summed_writes(finishes: list[Finished]) -> int | None:
    """The paying choices' cache writes summed (an upstream call's, or a local prompt's
    first choice's: the later ones find the prompt cached and write none of it); None when
    none of them has a count."""
    counts = [f.usage.num_cache_write_tokens for f in finishes if f.usage.num_cache_write_tokens is not None]
    return sum(counts) if counts else None


def _summed_details(finishes: list[Finished]) -> dict[str, int] | None:
    """Every choice's `completion_tokens_details`, summed per count; None when none has any."""
    details = [f.usage.completion_tokens_details for f in finishes if f.usage.completion_tokens_details is not None]
    if not details:
        return None
    summed: dict[str, int] = {}
    for one in details:
        for name, count in one.items():
            summed[name] = summed.get(name, 0) + count
    return summed


def queue_room(prepared: Prepared) -> int:
    """The engine queue room a local run's first engine request must find
    (`shards.dispatcher.Dispatcher.submit`'s `room`): its prompt's first choice needs room
    for all the prompt's choices; a later one none, being part of a request already
    admitted (it starts once the first has streamed, `_merged`)."""
    return prepared.num_per_prompt if prepared.is_prompt_head else 0


def run_choices(backend: Backend, prepared: Prepared) -> AsyncIterator[ChatEvent]:
    if prepared.num_choices == 1:
        return backend.run(prepared)
    runs = [dataclasses.replace(prepared, request_id=f"{prepared.request_id}-{index}", choice=index)
            for index in range(prepared.num_choices)]
    at_once = getattr(backend, "starts_choices_at_once", False)   # NOTE: a local engine's backend has none
    return _merged(backend, runs, prepared.num_per_prompt, runs_pay_own_prompt(prepared), at_once)


async def _merged(backend: Backend, runs: list[Prepared], group: int, pay_own_prompt: bool,
                  at_once: bool = False) -> AsyncIterator[ChatEvent]:
    """`pay_own_prompt`: each run is a call of its own, and each choice's `Finished` says so.
    `at_once`: every run starts now; else each prompt's first one, and the rest of its
    `group` once that one has sent an event."""
    queue: asyncio.Queue[ChatEvent | BaseException] = asyncio.Queue(MERGED_EVENTS_PER_RUN * len(runs))

    async def pump(run: Prepared) -> None:
        events = backend.run(run)
        try:
            async for event in events:
                event.choice = run.choice
                if pay_own_prompt and isinstance(event, Finished):
                    event.pays_own_prompt = True
                await queue.put(event)
        except Exception as exc:  # NOTE: handed to the reader, which raises it
            await queue.put(exc)
        finally:
            await events.aclose()

    tasks = [asyncio.create_task(pump(run)) for run in (runs if at_once else runs[::group])]
    under_way: set[int] = set(range(len(runs) // group)) if at_once else set()   # prompts whose runs all began
    num_open = len(runs)
    try:
        while num_open:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            prompt = item.choice // group
            if prompt not in under_way:  # its first choice is under way: the prompt is cached now
                under_way.add(prompt)
                tasks.extend(asyncio.create_task(pump(run)) for run in runs[prompt * group + 1:(prompt + 1) * group])
            if isinstance(item, Finished):
                num_open -= 1
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
