"""A request's `n` choices: one backend run per choice, merged into one event stream.

Invariants:
- with `n` = 1 the backend's own stream is returned untouched;
- every event of the merged stream carries its choice's index in `choice`, and the
  stream ends after the last choice's `Finished` (each choice's own `Finished` passes
  through, so a writer can close that choice);
- choice 0 starts first and the others once it has sent its first event: by then a local
  engine holds the prompt in its prefix cache, so the prompt is prefilled once, not n
  times;
- an error in any choice ends the merged stream with that error, and closing the merged
  stream (or an error) stops every choice's backend work;
- the tenant is charged up front for the prompt once and each choice's completion budget.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from gateway.backend import Backend, ChatEvent, Finished, Prepared, Usage


def with_choices(prepared: Prepared, num_choices: int | None) -> Prepared:
    """The request asking for `num_choices` (None: 1) and running max(that, its
    `best_of`) candidates, its reservation grown to pay for every candidate's
    completion budget."""
    num_returned = num_choices or 1
    num_runs = max(num_returned, prepared.best_of)
    if num_runs == 1:
        return prepared
    budget = prepared.num_reserved_tokens - prepared.num_prompt_tokens
    return dataclasses.replace(prepared, num_choices=num_runs, num_returned=num_returned,
                               num_reserved_tokens=prepared.num_prompt_tokens + budget * num_runs)


def merged_usage(finishes: list[Finished]) -> Finished:
    """One `Finished` for the whole request, from every choice's (in any order): choice
    0's reason, worker and prompt (the prompt is counted once, as OpenAI does), every
    choice's completion tokens."""
    first = min(finishes, key=lambda finished: finished.choice)
    usage = Usage(num_prompt_tokens=first.usage.num_prompt_tokens,
                  num_completion_tokens=sum(f.usage.num_completion_tokens for f in finishes),
                  num_cached_tokens=first.usage.num_cached_tokens)
    return Finished(first.finish_reason, usage, first.worker, first.ttft_s)


def run_choices(backend: Backend, prepared: Prepared) -> AsyncIterator[ChatEvent]:
    if prepared.num_choices == 1:
        return backend.run(prepared)
    runs = [dataclasses.replace(prepared, request_id=f"{prepared.request_id}-{index}", choice=index)
            for index in range(prepared.num_choices)]
    return _merged(backend, runs)


async def _merged(backend: Backend, runs: list[Prepared]) -> AsyncIterator[ChatEvent]:
    queue: asyncio.Queue[ChatEvent | BaseException] = asyncio.Queue()

    async def pump(run: Prepared) -> None:
        events = backend.run(run)
        try:
            async for event in events:
                event.choice = run.choice
                queue.put_nowait(event)
        except Exception as exc:  # NOTE: handed to the reader, which raises it
            queue.put_nowait(exc)
        finally:
            await events.aclose()

    tasks = [asyncio.create_task(pump(runs[0]))]
    num_open = len(runs)
    try:
        while num_open:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if len(tasks) == 1:  # choice 0 is under way: its prompt is cached now
                tasks.extend(asyncio.create_task(pump(run)) for run in runs[1:])
            if isinstance(item, Finished):
                num_open -= 1
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
