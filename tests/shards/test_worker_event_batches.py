"""A batched worker loop sends a decode pass's messages as one `EventBatch`: the same
messages, in the same order, as the loop that sends them one by one (shards/worker.py)."""
from __future__ import annotations

import dataclasses

from shards.model_runner import ModelRunner
from shards.protocol import EventBatch, FinishEvent, TokenEvent
from shards.worker import WorkerConfig, WorkerLoop
from tests.shards.test_worker import _item, _run


def _messages(tiny_loaded, batched: bool, **config) -> list:
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny", **config), runner, tiny_loaded.tokenizer, out.append,
                      batched=batched)
    for i in range(3):
        loop.handle(_item(f"r{i}", num_tokens=20 + 7 * i, max_tokens=5, seed=i))
    _run(loop)
    return out


def _comparable(message):
    """A message without its timings (a FinishEvent's TTFT and prefill seconds)."""
    if isinstance(message, FinishEvent):
        return dataclasses.replace(message, ttft_s=0.0, prefill_s=0.0)
    return message


def test_a_batched_loop_sends_the_same_messages_in_the_same_order(tiny_loaded):
    one_by_one = _messages(tiny_loaded, batched=False)
    batched = _messages(tiny_loaded, batched=True)
    assert not any(isinstance(m, EventBatch) for m in one_by_one)
    batches = [m for m in batched if isinstance(m, EventBatch)]
    assert batches and all(len(b.messages) > 1 for b in batches)   # a single message goes alone
    assert any(len({m.request_id for m in b.messages if isinstance(m, TokenEvent)}) == 3 for b in batches)
    flattened = [each for m in batched for each in (m.messages if isinstance(m, EventBatch) else [m])]
    assert [_comparable(m) for m in flattened] == [_comparable(m) for m in one_by_one]


def test_event_batches_off_in_the_config_sends_one_by_one(tiny_loaded):
    assert not any(isinstance(m, EventBatch) for m in _messages(tiny_loaded, batched=True, event_batches=False))
