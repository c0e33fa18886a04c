"""A worker's side of a prefix copy (shards/worker_transfers.py), driven through the
worker loop: a copy ships only what the importer lacks and serves the same greedy reply
as computing the prefix; a failed import is logged once, answered with 0 blocks, leaves
nothing matchable, and the worker goes on serving."""
from __future__ import annotations

import logging
import random

import pytest
import torch

from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.prefix_index import PrefixIndex
from shards.protocol import CacheEventsReport, FinishEvent, SamplingParams, TokenEvent, WorkItem
from shards.transfer_messages import ExportPrefix, ImportPrefix, PrefixExported, PrefixImported
from shards.worker import WorkerConfig, WorkerLoop

BLOCK = 16
PROMPT = random.Random(11).choices(range(250), k=100)   # 6 full blocks and a partial one


def _loop(tiny_loaded, worker_id: str):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=BLOCK)
    out: list = []
    return WorkerLoop(worker_id, WorkerConfig(model="tiny"), runner, tiny_loaded.tokenizer, out.append), out


def _serve(loop, out, request_id: str, prompt: list[int]) -> tuple[list[int], str, FinishEvent]:
    """Run one greedy request to its end: its tokens, its text, its finish."""
    out.clear()
    loop.handle(WorkItem(request_id, "t", list(prompt),
                         SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), "s"))
    for _ in range(200):
        if not loop.has_work():
            break
        loop.step()
    tokens = [t for e in out if isinstance(e, TokenEvent) and e.request_id == request_id for t in e.token_ids]
    text = "".join(e.text for e in out if isinstance(e, TokenEvent) and e.request_id == request_id)
    (finish,) = [e for e in out if isinstance(e, FinishEvent) and e.request_id == request_id]
    return tokens, text, finish


def _import_message(exported: PrefixExported, prompt: list[int]) -> ImportPrefix:
    """The ImportPrefix the dispatcher makes of `exported` (shards/dispatch_messages.py)."""
    num_tokens = (exported.first_block + exported.num_blocks) * BLOCK
    return ImportPrefix(exported.transfer_id, "t", "s", tuple(prompt[:num_tokens]), exported.shm_name,
                        exported.num_blocks, exported.payload, exported.first_block)


@pytest.mark.parametrize("inline", [False, True], ids=["shared-memory", "bytes"])
def test_a_copy_past_the_blocks_the_destination_holds_ships_only_the_rest_and_replies_alike(tiny_loaded, inline):
    alone, alone_out = _loop(tiny_loaded, "w2")
    expected = _serve(alone, alone_out, "alone", PROMPT)[:2]
    holder, holder_out = _loop(tiny_loaded, "w1")
    _serve(holder, holder_out, "warm", PROMPT)
    dst, dst_out = _loop(tiny_loaded, "w0")
    _serve(dst, dst_out, "head", PROMPT[:40])   # the destination holds the first 2 blocks
    holder_out.clear()
    holder.handle(ExportPrefix("x0", "t", tuple(PROMPT[:6 * BLOCK]), 6, inline=inline, first_block=2))
    (exported,) = [m for m in holder_out if isinstance(m, PrefixExported)]
    assert (exported.first_block, exported.num_blocks) == (2, 4)
    if inline:
        assert len(exported.payload) == 4 * holder.runner.layout.bytes_per_block
    dst_out.clear()
    dst.handle(_import_message(exported, PROMPT))
    (imported,) = [m for m in dst_out if isinstance(m, PrefixImported)]
    assert imported.num_blocks == 4
    tokens, text, finish = _serve(dst, dst_out, "copied", PROMPT)
    assert (tokens, text) == expected   # byte for byte what computing the prefix gives
    assert finish.num_cached_tokens == 96


def test_a_failed_import_is_logged_once_answers_0_blocks_and_the_worker_prefills_the_prompt(
        tiny_loaded, monkeypatch, caplog):
    alone, alone_out = _loop(tiny_loaded, "w2")
    expected = _serve(alone, alone_out, "alone", PROMPT)[:2]
    holder, holder_out = _loop(tiny_loaded, "w1")
    _serve(holder, holder_out, "warm", PROMPT)
    dst, dst_out = _loop(tiny_loaded, "w0")
    hashes, blocks = dst.runner.blocks.hash_prompt("t", PROMPT)
    answers = []
    index = PrefixIndex()   # the router's view, fed by the worker's cache events
    with monkeypatch.context() as patched, caplog.at_level(logging.ERROR, logger="stepahead.shards"):
        def failing(*_args, **_kwargs):
            raise RuntimeError("injected: the KV write failed")

        patched.setattr(torch.Tensor, "index_copy_", failing)
        for transfer_id in ("x0", "x1"):   # the same failure twice: one log line
            holder_out.clear()
            holder.handle(ExportPrefix(transfer_id, "t", tuple(PROMPT[:6 * BLOCK]), 6, inline=True))
            (exported,) = [m for m in holder_out if isinstance(m, PrefixExported)]
            dst_out.clear()
            dst.handle(ImportPrefix(transfer_id, "t", "s", tuple(PROMPT[:6 * BLOCK]), None, exported.num_blocks,
                                    exported.payload))
            answers += [m.num_blocks for m in dst_out if isinstance(m, PrefixImported)]
            for report in (m for m in dst_out if isinstance(m, CacheEventsReport)):
                index.apply("w0", report.events)
            assert dst.runner.blocks.match("t", hashes, blocks).num_blocks == 0
    assert answers == [0, 0] and index.num_blocks("w0") == 0
    assert [r.getMessage() for r in caplog.records] == ["worker w0: a prefix import failed"]
    assert all(b.ref_count == 0 for b in dst.runner.blocks.blocks(Tier.HOT))
    tokens, text, finish = _serve(dst, dst_out, "after", PROMPT)
    assert finish.num_cached_tokens == 0   # prefilled, not served from unwritten KV
    assert (tokens, text) == expected
