"""Runs one model over one prefix cache: prefill only the uncached suffix, then decode.

For a request the runner finds the longest run of the prompt's full blocks already
cached (promoting host copies while the hot tier has room, and reading the rest of a
host match straight from the host arena: shards/prefix_reads.py), assembles the model's
cache object from the KV arenas, runs the forward pass on the uncached suffix only, and
after the prefill commits the prompt's new full blocks to the arena (those the hot tier
has no room for, being full of blocks in use, to the host tier when it has one). When
the request ends it commits the generated tokens' full blocks too and drops its block
references.

Invariant (tested): logits computed with a reused prefix equal a full recompute.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from cache.block_manager import BlockManager
from cache.hashing import chain_hashes, split_blocks, tenant_salt
from cache.kv_arena import ArenaMover
from shards.batched_decode import decode_rows, enable_row_batching, prefill_chunk_with_decodes
from shards.detokenizer import Detokenizer
from shards.kv_cache import make_cache
from shards.kv_memory import kv_arena, kv_layout
from shards.model_loader import LoadedModel
from shards.prefix_reads import PrefixHit, commit_start, read_prefix
from shards.protocol import SamplingParams, TokenLogprob, WorkItem
from shards.sampling import (OutputPenalties, adjusted_logits, make_generator, sample_next, seed_for_position,
                             token_logprob)


@dataclass(slots=True)
class RunningSequence:
    """One request being generated. `block_ids` are the hot blocks it holds a reference
    on (its cached prefix's hot part plus the blocks it committed); released exactly
    once. Host blocks read into its cache hold no reference (shards/prefix_reads.py)."""

    item: WorkItem
    detokenizer: Detokenizer
    generator: torch.Generator | None
    cache: DynamicCache
    block_ids: list[int]
    num_cached_tokens: int
    started_s: float
    first_token_s: float = 0.0
    last_token_s: float = 0.0  # on the worker loop's clock, when it last emitted a token
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[TokenLogprob] = field(default_factory=list)  # when the request asks
    output_penalties: OutputPenalties = field(default_factory=OutputPenalties)  # of `output_ids`
    prompt_logprobs: list[TokenLogprob] | None = None  # prompt tokens 1.., while not yet sent
    released: bool = False

    def __post_init__(self) -> None:
        """A resumed request (`WorkItem.resumed`) starts with the output another worker sent."""
        num_resumed = self.item.num_resumed_tokens
        if num_resumed:
            sent = self.item.prompt_token_ids[-num_resumed:]
            self.output_ids.extend(sent)
            self.detokenizer.resume(sent, self.item.num_resumed_chars)

    @property
    def token_ids(self) -> list[int]:
        """The prompt and the output: the tokens whose KV the sequence's cache holds (its
        last sampled token's once decoded)."""
        return self.item.prompt_token_ids[:self.item.num_prompt_tokens] + self.output_ids

    @property
    def num_kv_tokens(self) -> int:
        return self.cache.get_seq_length()

    def sample(self, logits: torch.Tensor) -> int:
        """Sample the next token from its `[vocab]` logits (after the request's penalties
        and bias) and append it, and, when the request asked, its log probability under
        the model: `output_logprobs` stays parallel to the output this worker sampled (the
        tail of `output_ids`; a resumed request's sent tokens came with theirs)."""
        params = self.item.sampling
        if self.generator is not None:   # each position's draw its own: the same when resumed elsewhere
            self.generator.manual_seed(seed_for_position(params.seed, len(self.output_ids)))
        adjusted = adjusted_logits(logits, params, self.output_ids, self.output_penalties)
        token = sample_next(adjusted, params, self.generator)
        if params.logprobs is not None:
            self.output_logprobs.append(token_logprob(logits, token, params.logprobs))
        self.output_ids.append(token)
        return token


class ModelRunner:
    """A model plus its block manager and KV arenas. Not thread-safe: one worker loop
    drives it."""

    def __init__(self, loaded: LoadedModel, *, num_hot_blocks: int, num_host_blocks: int = 0,
                 block_size: int = 16, policy=None, prefix_group_of=None,
                 prefix_caching: bool = True, evict_background_first: bool = True,
                 clock: Callable[[], float] = time.time):
        self.loaded = loaded
        self.prefix_caching = prefix_caching
        self.model = loaded.model
        self.block_size = block_size
        first = next(self.model.parameters())
        self.device = first.device
        self.layout = kv_layout(self.model, loaded.model_id, block_size, first.dtype)
        # the hot tier lives beside the weights; the host tier is always CPU memory
        # (page-locked when the hot tier is on a GPU, so host<->hot copies are DMA)
        self.hot = kv_arena(self.layout, num_hot_blocks, "hot", device=self.device)
        self.host = kv_arena(self.layout, num_host_blocks, "host", pin_memory=self.device.type == "cuda") \
            if num_host_blocks > 0 else None
        self.blocks = BlockManager(
            num_hot_blocks=num_hot_blocks, num_host_blocks=num_host_blocks,
            block_size=block_size, bytes_per_block=self.layout.bytes_per_block,
            policy=policy, mover=ArenaMover(self.hot, self.host), prefix_groups=prefix_group_of,
            # NOTE: the wall clock (`clock`: a test's own), because forecasts made in the
            # gateway process carry wall-clock times that the policy compares with its own clock.
            clock=clock, evict_background_first=evict_background_first)
        self._prefix_group_of = prefix_group_of or (lambda tenant: None)
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = loaded.tokenizer.eos_token_id
        self.eos_token_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        # a model's output layer may be padded past its tokenizer (the tiny model's to a
        # multiple of 64): those rows are no tokens, so no logits leave here with them
        self.num_token_ids = len(loaded.tokenizer)
        # several running requests decode in one forward (shards.batched_decode)
        self.batches_decode = enable_row_batching(self.model)
        self.num_decode_passes = 0  # forward passes of decode steps
        self.num_decoded_tokens = 0  # tokens those passes produced

    # --- prefix cache ------------------------------------------------------------
    def _keys(self, tenant: str, token_ids: list[int]):
        salt = tenant_salt(tenant, self._prefix_group_of(tenant))
        return chain_hashes(token_ids, self.block_size, salt), split_blocks(token_ids, self.block_size)

    def reuse_prefix(self, tenant: str, session: str | None, token_ids: list[int], *,
                     background: bool = False) -> PrefixHit:
        """Take references on the longest cached prefix of `token_ids` and build the
        model cache for it, its host part read straight from the host arena where the
        hot tier has no room (`background`: for a flex request, see
        `cache.background_blocks`). At least one prompt token is always left to compute."""
        if not self.prefix_caching:
            return PrefixHit([], 0, None)
        hashes, blocks = self._keys(tenant, token_ids)
        match = self.blocks.match(tenant, hashes, blocks)
        acquired = self.blocks.acquire_run(tenant, session, match, len(token_ids), background=background)
        return read_prefix(self.blocks, self.hot, self.host, self.model.config, acquired, len(token_ids))

    def commit(self, tenant: str, session: str | None, token_ids: list[int],
               cache: DynamicCache, held: list[int], *, background: bool = False,
               num_cached_tokens: int = 0) -> None:
        """Store the full blocks of `token_ids` (whose KV is in `cache`) beyond the
        `held` prefix and the `num_cached_tokens` the request's cache was built from
        (host blocks read through included: `commit_start`) (`background`: a flex
        request's); the new block ids are appended to `held`."""
        num_full = min(len(token_ids), cache.get_seq_length()) // self.block_size
        start = commit_start(self.blocks, held, num_cached_tokens)
        if num_full <= start or not self.prefix_caching:
            return
        hashes, blocks = self._keys(tenant, token_ids[: num_full * self.block_size])
        placed = self.blocks.commit(tenant, session, hashes, blocks, start, background=background)
        layer_kvs = [(layer.keys, layer.values) for layer in cache.layers]
        for offset, (block_id, needs_write) in enumerate(placed):
            if needs_write:
                self.hot.write([block_id], layer_kvs, (start + offset) * self.block_size)
            held.append(block_id)
        if self.host is not None and start + len(placed) < num_full:
            # HOT had no room left (full of blocks in use): the rest goes to HOST, as a demotion
            # would put it there, so the next request finds it (a host hit) instead of recomputing
            spilled = self.blocks.commit_to_host(tenant, session, hashes, blocks, start + len(placed),
                                                 background=background)
            self.host.write_positions(spilled, layer_kvs)

    def release(self, seq: RunningSequence) -> None:
        if not seq.released:
            seq.released = True
            self.blocks.release(seq.block_ids)

    def synchronize(self) -> None:
        """Wait for the device's queued work (GPU kernels run asynchronously), so a
        timer read after this measures the work, not its launch. No-op on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- model passes --------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, token_ids: list[int], cache: DynamicCache | None, first_position: int,
                logits_to_keep: int = 1):
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        positions = torch.arange(first_position, first_position + len(token_ids),
                                 device=self.device).unsqueeze(0)
        out = self.model(input_ids=ids, cache=cache if cache is not None else make_cache(
            self.model.config), position_ids=positions, use_cache=True,
            logits_to_keep=logits_to_keep)
        return self._tokens_only(out.logits), out.cache

    def _tokens_only(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` without the columns of ids past the tokenizer's (a view, no copy)."""
        return logits[..., :self.num_token_ids] if logits.shape[-1] > self.num_token_ids else logits

    def prompt_logits(self, tenant: str, token_ids: list[int]) -> tuple[torch.Tensor, int]:
        """Logits of the uncached suffix of `token_ids` (rows for positions
        num_cached..L-1) and num_cached; commits the prompt's blocks. For tests/benchmarks."""
        hit = self.reuse_prefix(tenant, None, token_ids)
        logits, cache = self.forward(token_ids[hit.num_cached_tokens:], hit.cache,
                                     hit.num_cached_tokens, logits_to_keep=0)
        held = list(hit.block_ids)
        self.commit(tenant, None, token_ids, cache, held, num_cached_tokens=hit.num_cached_tokens)
        self.blocks.release(held)
        return logits[0], hit.num_cached_tokens

    def start(self, item: WorkItem, tokenizer) -> tuple[RunningSequence, int]:
        """Prefill `item` (suffix only) and sample its first token. The prompt's new
        blocks are committed by `commit_prompt`, after the first token is sent."""
        started = time.perf_counter()
        prompt = item.prompt_token_ids
        hit = self.reuse_prefix(item.tenant, item.session, prompt, background=item.flex)
        seq = RunningSequence(
            item=item, detokenizer=Detokenizer(tokenizer, tuple(item.sampling.stop)),
            generator=make_generator(item.sampling, self.device), cache=hit.cache, block_ids=list(hit.block_ids),
            num_cached_tokens=hit.num_cached_tokens, started_s=started)
        try:
            logits, seq.cache = self.forward(prompt[hit.num_cached_tokens:], hit.cache,
                                             hit.num_cached_tokens)
            token = seq.sample(logits[0, -1])
            seq.first_token_s = time.perf_counter()
        except BaseException:
            self.release(seq)
            raise
        return seq, token

    def commit_prompt(self, seq: RunningSequence) -> None:
        if not seq.released:
            self.commit(seq.item.tenant, seq.item.session, seq.item.prompt_token_ids, seq.cache,
                        seq.block_ids, background=seq.item.flex, num_cached_tokens=seq.num_cached_tokens)

    def step(self, seq: RunningSequence) -> int:
        """Feed the last sampled token, sample the next."""
        position = seq.num_kv_tokens
        logits, seq.cache = self.forward([seq.output_ids[-1]], seq.cache, position)
        self.num_decode_passes += 1
        self.num_decoded_tokens += 1
        return self._sample(seq, logits[0, -1])

    def step_many(self, seqs: list[RunningSequence]) -> list[int | Exception]:
        """`step` for each of `seqs`, in one forward pass when the model allows it (the
        same tokens up to float rounding; each keeps its own sampling generator). Per
        sequence its token or, if its step failed alone, the exception; raises only when
        the batched pass failed, with every cache as it was."""
        if len(seqs) == 1 or not self.batches_decode:
            return _each(self.step, seqs)
        logits = self._tokens_only(decode_rows(self.model, [seq.output_ids[-1] for seq in seqs],
                                               [seq.cache for seq in seqs], self.device))
        self.num_decode_passes += 1
        self.num_decoded_tokens += len(seqs)
        return _each(self._sample, seqs, logits)

    def step_with_chunk(self, chunk: list[int], cache: DynamicCache | None,
                        seqs: list[RunningSequence]) -> tuple[torch.Tensor, DynamicCache, list[int | Exception]]:
        """A prefill chunk (appended to `cache`, which holds the prompt before it; None:
        nothing yet) and a `step` for each of `seqs`, in one forward pass. Returns the
        chunk's last logits, its cache, and per sequence its sampled token or, if its
        sampling failed, the exception. Raises only when the pass itself failed, with
        every cache as it was. Needs `batches_decode`."""
        if cache is None:
            cache = make_cache(self.model.config)
        logits = self._tokens_only(prefill_chunk_with_decodes(
            self.model, chunk, cache, [seq.output_ids[-1] for seq in seqs], [seq.cache for seq in seqs], self.device))
        self.num_decode_passes += 1
        self.num_decoded_tokens += len(seqs)
        return logits[0], cache, _each(self._sample, seqs, logits[1:])

    @staticmethod
    def _sample(seq: RunningSequence, logits: torch.Tensor) -> int:
        return seq.sample(logits)

    def finish(self, seq: RunningSequence) -> None:
        """Commit the generated tokens' full blocks, then release every reference."""
        try:
            if not seq.released and seq.cache is not None:
                tokens = seq.token_ids
                self.commit(seq.item.tenant, seq.item.session, tokens, seq.cache, seq.block_ids,
                            background=seq.item.flex, num_cached_tokens=seq.num_cached_tokens)
        finally:
            self.release(seq)

    def is_stop_token(self, token: int, params: SamplingParams) -> bool:
        return (not params.ignore_eos and token in self.eos_token_ids) or token in params.stop_token_ids


def _each(step, seqs, *columns) -> list[int | Exception]:
    """`step(seq, ...)` for each sequence (with its items of `columns`): its token, or the
    exception it raised, so one failing does not cost the others their tokens."""
    results: list[int | Exception] = []
    for args in zip(seqs, *columns):
        try:
            results.append(step(*args))
        except Exception as exc:
            results.append(exc)
    return results
