"""Where workers run the model: device names are checked before anything loads, and on
a CUDA GPU (skipped without one) the GPU path gives the CPU path's answers.

The CUDA tests are the GPU check of the engine: prefix reuse, the host tier, seeded
sampling, the shared-prefix copy between workers and a whole engine request, each
compared with the same work on the CPU.
"""
from __future__ import annotations

import asyncio
import json
import random

import pytest
import torch

from cache.tiers import Tier
from shards.engine import LocalEngine
from shards.kv_transfer import export_prefix, import_prefix, measure_costs
from shards.model_files import ModelLoadError, check_model
from shards.model_loader import (avoid_per_length_attention_plans, choose_dtype, has_fast_bfloat16, load_model,
                                 resolve_device, resolve_dtype)
from shards.model_runner import ModelRunner
from shards.protocol import FinishEvent, SamplingParams, TokenEvent, WorkItem
from shards.sampling import make_generator, sample_next

BLOCK = 16
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def _tokens(seed: int, n: int, vocab: int = 250) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


# --- device names (every machine) ---------------------------------------------------
def test_resolve_device_accepts_cpu():
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["tpu", "mps", "gpu0", ""])
def test_resolve_device_rejects_names_it_cannot_serve_with_a_hint(name):
    with pytest.raises(ModelLoadError, match="cpu' or 'cuda"):
        resolve_device(name)


def test_resolve_device_cuda_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_resolve_device_cuda_index_past_the_gpus_says_how_many(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ModelLoadError, match="only 1 CUDA GPU"):
        resolve_device("cuda:3")


def test_check_model_names_the_model_and_the_device(monkeypatch, tmp_path):
    check_model("tiny", "cpu")
    with pytest.raises(ModelLoadError, match=f"{tmp_path} is not a Hugging Face model directory: it lacks "
                                             r"config.json and a tokenizer file \(tokenizer.json, "):
        check_model(str(tmp_path), "cpu")   # an empty directory: found before any worker loads it
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="it lacks a tokenizer file"):
        check_model(str(tmp_path), "cpu")
    (tmp_path / "tokenizer.json").write_text("{}")
    llama = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(llama))
    check_model(str(tmp_path), "cpu")  # a local directory is accepted as a model
    for config, what in (({"architectures": ["GPT2LMHeadModel"], "n_head": 4, "n_embd": 64}, "a GPT2LMHeadModel model"),
                         ({**llama, "architectures": ["BertModel"]}, "a BertModel model")):
        (tmp_path / "config.json").write_text(json.dumps(config))
        with pytest.raises(ModelLoadError, match=f"{tmp_path} holds {what}, which the engine cannot serve: it serves "
                                                 "decoder-only causal language models configured like Llama"):
            check_model(str(tmp_path), "cpu")   # before binding: not a traceback from every worker
    for text, says in (("{model_type: llama", "cannot be read as JSON"), ('["llama"]', "holds a JSON list")):
        (tmp_path / "config.json").write_text(text)
        with pytest.raises(ModelLoadError, match=f"{tmp_path / 'config.json'} {says}"):
            check_model(str(tmp_path), "cpu")   # not in every worker, after torch
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="neither 'smollm2', 'tiny'"):
        check_model(str(tmp_path / "missing"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        check_model("tiny", "cuda")


def test_a_model_transformers_cannot_load_raises_model_load_error_with_its_words(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=f"the model in {tmp_path} could not be loaded: "
                                             r"ValueError: .*no-such-architecture"):
        load_model(str(tmp_path))


def test_cpu_runner_keeps_weights_and_both_tiers_on_the_cpu(tiny_loaded):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=8, num_host_blocks=8, block_size=BLOCK)
    assert runner.device.type == "cpu"
    assert runner.hot.data.device.type == "cpu" and runner.host.data.device.type == "cpu"


def test_engine_passes_the_device_to_its_workers_and_reports_it():
    assert LocalEngine("tiny").config.device == "cpu"
    eng = LocalEngine("tiny", device="cuda:0", dtype="bfloat16")
    assert eng.config.device == "cuda:0"
    assert (eng.health()["device"], eng.health()["dtype"]) == ("cuda:0", "bfloat16")


def test_engine_start_refuses_a_missing_gpu_before_spawning(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    eng = LocalEngine("tiny", num_workers=1, device="cuda")
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        asyncio.run(eng.start())
    assert eng._transport is None  # nothing was spawned


# --- dtypes (every machine) ----------------------------------------------------------
def test_resolve_dtype_names_the_three_supported_and_refuses_others():
    assert [resolve_dtype(n) for n in ("float32", "bfloat16", "float16")] == [
        torch.float32, torch.bfloat16, torch.float16]
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    for bad in ("float64", "int8", torch.float64):
        with pytest.raises(ModelLoadError, match="use 'auto' or one of float32, bfloat16, float16"):
            resolve_dtype(bad)
    with pytest.raises(ModelLoadError, match="dtype 'fp8'"):
        check_model("tiny", "cpu", "fp8")


def _cpu_bfloat16(monkeypatch, amx: bool, avx512_bf16: bool) -> None:
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)


def test_a_cpu_has_fast_bfloat16_with_amx_tiles_or_avx512_bf16(monkeypatch):
    for amx, avx512_bf16 in ((True, False), (False, True), (True, True), (False, False)):
        _cpu_bfloat16(monkeypatch, amx, avx512_bf16)
        assert has_fast_bfloat16("cpu") is (amx or avx512_bf16)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert has_fast_bfloat16("cpu") is False  # a torch without the probes: no
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert has_fast_bfloat16("cuda:0") is False


@pytest.fixture
def cudnn_attention_flag():
    """torch's process-wide cuDNN-attention switch, put back as it was after the test."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cudnn_attention_is_turned_off_for_cuda_devices_only(cudnn_attention_flag):
    avoid_per_length_attention_plans(torch.device("cpu"))
    assert torch.backends.cuda.cudnn_sdp_enabled() is True
    avoid_per_length_attention_plans(torch.device("cuda", 0))
    assert torch.backends.cuda.cudnn_sdp_enabled() is False


def test_auto_dtype_is_bfloat16_only_where_the_device_computes_it_and_never_for_tiny(monkeypatch):
    _cpu_bfloat16(monkeypatch, amx=True, avx512_bf16=False)
    assert choose_dtype("auto", "smollm2", "cpu") == "bfloat16"
    assert choose_dtype("auto", "/models/llama", "cpu") == "bfloat16"
    assert choose_dtype("auto", "tiny", "cpu") == "float32"
    for given in ("float32", "float16", "bfloat16"):
        assert choose_dtype(given, "smollm2", "cpu") == given  # a named dtype is kept
    _cpu_bfloat16(monkeypatch, amx=False, avx512_bf16=False)
    assert choose_dtype("auto", "smollm2", "cpu") == "float32"
    check_model("tiny", "cpu", "auto")  # accepted before anything loads


def test_auto_loads_the_tiny_model_in_float32():
    loaded = load_model("tiny", dtype="auto")
    assert next(loaded.model.parameters()).dtype is torch.float32


def test_a_local_engine_settles_auto_at_start_and_reports_what_its_workers_use():
    eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=16)
    assert eng.config.dtype == "auto"

    async def started_dtype() -> str:
        await eng.start()
        try:
            return eng.health()["dtype"]
        finally:
            await eng.stop()

    assert asyncio.run(started_dtype()) == "float32"
    assert eng.config.dtype == "float32"


def test_a_model_directory_settles_auto_in_a_child_process_and_its_workers_load_it(tmp_path):
    from shards.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    eng = LocalEngine(str(tmp_path), num_workers=1, num_hot_blocks=16)

    async def started() -> dict:
        await eng.start()
        try:
            return eng.health()
        finally:
            await eng.stop()

    health = asyncio.run(started())
    assert health["dtype"] == choose_dtype("auto", str(tmp_path), "cpu") == eng.config.dtype
    assert health["workers"]["w0"]["ready"]


@pytest.fixture(scope="module")
def bf16_loaded():
    return load_model("tiny", dtype="bfloat16")


def test_bfloat16_weights_give_a_bfloat16_kv_cache_of_half_the_bytes(tiny_loaded, bf16_loaded):
    assert next(bf16_loaded.model.parameters()).dtype is torch.bfloat16
    full = ModelRunner(tiny_loaded, num_hot_blocks=8, block_size=BLOCK)
    half = ModelRunner(bf16_loaded, num_hot_blocks=8, num_host_blocks=8, block_size=BLOCK)
    assert half.hot.data.dtype is torch.bfloat16 and half.host.data.dtype is torch.bfloat16
    assert half.layout.bytes_per_block * 2 == full.layout.bytes_per_block


def test_bfloat16_reused_prefix_and_shared_memory_copy_give_the_recomputed_logits(bf16_loaded):
    prompt = _tokens(21, 80)
    source = ModelRunner(bf16_loaded, num_hot_blocks=32, block_size=BLOCK)
    reference, _ = source.prompt_logits("t", prompt)
    logits, cached = source.prompt_logits("t", prompt)
    assert cached == 79
    # bfloat16 keeps 8 bits of mantissa: the same math, rounded differently in chunks
    torch.testing.assert_close(logits.float(), reference[-1:].float(), atol=0.1, rtol=0)
    name, num_blocks = export_prefix(source, "t", prompt, max_blocks=16)
    target = ModelRunner(bf16_loaded, num_hot_blocks=32, block_size=BLOCK)
    assert import_prefix(target, "t", None, prompt, name, num_blocks) == num_blocks == 5
    torch.testing.assert_close(target.hot.data[:, :, :, :5], source.hot.data[:, :, :, :5], atol=0, rtol=0)


def test_engine_passes_the_dtype_and_refuses_an_unknown_one_before_spawning():
    assert LocalEngine("tiny", dtype="bfloat16").config.dtype == "bfloat16"
    eng = LocalEngine("tiny", num_workers=1, dtype="float8")
    with pytest.raises(ModelLoadError, match="dtype 'float8'"):
        asyncio.run(eng.start())
    assert eng._transport is None


# --- the GPU path (CUDA machines only) ------------------------------------------------
@pytest.fixture(scope="module")
def cuda_loaded():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    return load_model("tiny", device="cuda")


@needs_cuda
def test_loading_onto_a_gpu_turns_cudnn_attention_off(cudnn_attention_flag):
    load_model("tiny", device="cuda")   # cuDNN builds an attention plan per sequence length
    assert torch.backends.cuda.cudnn_sdp_enabled() is False


@needs_cuda
def test_cuda_runner_keeps_hot_tier_on_the_gpu_and_host_tier_pinned(cuda_loaded):
    runner = ModelRunner(cuda_loaded, num_hot_blocks=8, num_host_blocks=8, block_size=BLOCK)
    assert runner.hot.data.is_cuda
    assert not runner.host.data.is_cuda and runner.host.data.is_pinned()


@needs_cuda
@pytest.mark.parametrize("shared_prefix", [16, 37, 95])
def test_cuda_reused_prefix_logits_equal_a_cpu_full_recompute(tiny_loaded, cuda_loaded, shared_prefix):
    prompt = _tokens(shared_prefix, shared_prefix) + _tokens(shared_prefix + 1, 30)
    reference, _ = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=BLOCK).prompt_logits("t", prompt)
    runner = ModelRunner(cuda_loaded, num_hot_blocks=64, block_size=BLOCK)
    runner.prompt_logits("t", prompt[:shared_prefix] + _tokens(99, 20))
    logits, cached = runner.prompt_logits("t", prompt)
    assert cached == shared_prefix // BLOCK * BLOCK > 0
    torch.testing.assert_close(logits.cpu(), reference[cached:], atol=2e-3, rtol=0)


@needs_cuda
def test_cuda_host_tier_round_trip_gives_the_same_logits(cuda_loaded):
    first = _tokens(1, 64)
    runner = ModelRunner(cuda_loaded, num_hot_blocks=4, num_host_blocks=16, block_size=BLOCK)
    reference, _ = runner.prompt_logits("t", first)
    runner.prompt_logits("t", _tokens(2, 64))  # pushes `first` down to the host tier
    assert runner.blocks.stats().num_demotions > 0
    logits, cached = runner.prompt_logits("t", first)
    assert cached == 63
    torch.testing.assert_close(logits, reference[-1:], atol=1e-4, rtol=0)


@needs_cuda
def test_cuda_seeded_sampling_repeats(cuda_loaded):
    params = SamplingParams(max_tokens=1, temperature=1.0, top_p=0.9, seed=7)
    logits = torch.randn(300, device="cuda")
    draws = [[sample_next(logits, params, g) for _ in range(10)]
             for g in (make_generator(params, "cuda"), make_generator(params, "cuda"))]
    assert draws[0] == draws[1]


@needs_cuda
def test_cuda_prefix_export_import_between_runners(cuda_loaded):
    prompt = _tokens(5, 80)
    source = ModelRunner(cuda_loaded, num_hot_blocks=32, block_size=BLOCK)
    reference, _ = source.prompt_logits("t", prompt)
    name, num_blocks = export_prefix(source, "t", prompt, max_blocks=16)
    assert num_blocks == 5
    target = ModelRunner(cuda_loaded, num_hot_blocks=32, block_size=BLOCK)
    assert import_prefix(target, "t", None, prompt, name, num_blocks) == 5
    logits, cached = target.prompt_logits("t", prompt)
    assert cached == 79
    torch.testing.assert_close(logits, reference[-1:], atol=1e-4, rtol=0)
    assert all(b.ref_count == 0 for b in target.blocks.blocks(Tier.HOT))
    costs = measure_costs(target)
    assert costs.prefill_s_per_token > 0 and costs.export_s_per_block > 0


@needs_cuda
def test_cuda_engine_serves_a_request_and_reuses_its_prefix():
    async def run():
        eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=64, threads_per_worker=1, device="cuda")
        await asyncio.wait_for(eng.start(), 180)
        try:
            prompt = eng.tokenizer.encode("a prompt served on the GPU " * 4, add_special_tokens=False)
            params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
            runs = []
            for i in range(2):
                runs.append([e async for e in eng.generate(WorkItem(f"g{i}", "t", prompt, params))])
            return runs
        finally:
            await eng.stop()

    first, second = asyncio.run(run())
    tokens = [[t for e in run if isinstance(e, TokenEvent) for t in e.token_ids] for run in (first, second)]
    assert len(tokens[0]) == 4 and tokens[0] == tokens[1]
    assert isinstance(second[-1], FinishEvent) and second[-1].num_cached_tokens > 0


def test_bare_cuda_spreads_workers_over_the_gpus_and_an_index_pins_them():
    from shards.model_loader import worker_device
    assert [worker_device("cuda", i, 2) for i in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert worker_device("cuda", 3, 1) == "cuda"
    assert worker_device("cuda:1", 0, 4) == "cuda:1"
    assert worker_device("cpu", 5, 8) == "cpu"


@needs_cuda
def test_cuda_batched_decode_gives_the_one_at_a_time_tokens(cuda_loaded):
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    prompts = [_tokens(20 + i, n) for i, n in enumerate((7, 40, 90))]

    def generate(loaded, batched):
        runner = ModelRunner(loaded, num_hot_blocks=64, block_size=BLOCK)
        seqs = []
        for i, prompt in enumerate(prompts):
            seq, _ = runner.start(WorkItem(f"b{i}", "t", prompt, params), loaded.tokenizer)
            seqs.append(seq)
        for _ in range(params.max_tokens - 1):
            if batched:
                runner.step_many(seqs)
            else:
                for seq in seqs:
                    runner.step(seq)
        return [seq.output_ids for seq in seqs]

    assert generate(cuda_loaded, batched=True) == generate(cuda_loaded, batched=False)


@needs_cuda
def test_cuda_chunk_with_riding_decodes_equals_each_alone(cuda_loaded):
    from shards.batched_decode import prefill_chunk_with_decodes
    from tests.shards.test_batched_decode import _copy

    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    runner = ModelRunner(cuda_loaded, num_hot_blocks=64, block_size=BLOCK)
    seqs = [runner.start(WorkItem(f"c{i}", "t", _tokens(30 + i, n), params), cuda_loaded.tokenizer)[0]
            for i, n in enumerate((9, 70))]
    prompt = _tokens(40, 60)
    _, chunk_cache = runner.forward(prompt[:20], None, 0)
    chunk_alone, _ = runner.forward(prompt[:44], None, 0)
    rows_alone = [runner.forward(seq.output_ids[-1:], _copy(seq.cache, cuda_loaded), seq.num_kv_tokens)[0][0, -1]
                  for seq in seqs]
    logits = prefill_chunk_with_decodes(cuda_loaded.model, prompt[20:44], chunk_cache,
                                        [seq.output_ids[-1] for seq in seqs], [seq.cache for seq in seqs],
                                        runner.device)[:, :runner.num_token_ids]   # as the runner's
    torch.testing.assert_close(logits[0], chunk_alone[0, -1], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1:], torch.stack(rows_alone), atol=1e-4, rtol=0)
