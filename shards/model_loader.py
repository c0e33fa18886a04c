"""Loading a worker's model with torch: weights, the embedded GGUF's conversion, devices
and dtypes. Which names mean which files, and the tokenizer alone, are in
`shards.model_files`, which the gateway's process uses without importing torch.
"""
from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from shards.gguf_read_once import gguf_read_once
from shards.transformers_names import transformers_names
from shards.model_files import (AUTO_DTYPE, DTYPE_NAMES, EMBEDDED_MODEL, SMOLLM2_MODEL_ID, TINY_MODEL,
                                ModelLoadError, check_model, check_tokenizer_fits, conversion_dir, converted_smollm2,
                                dtype_without_probe, find_smollm2_gguf, load_tokenizer, model_dir,
                                needs_conversion, one_line_error, remove_abandoned_conversions,
                                unsupported_dtype)


@dataclass(frozen=True, slots=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    model_id: str
    max_context_tokens: int


def _load_dir(path: Path, dtype: torch.dtype):
    [AutoModelForCausalLM] = transformers_names("AutoModelForCausalLM")
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, output_loading_info=True)
    except Exception as exc:   # what transformers raises for files it cannot use varies; its words are the reason
        raise ModelLoadError(f"the model in {path} could not be loaded: {one_line_error(exc)}") from exc
    missing = sorted(loading.get("missing_keys") or ())
    if missing:   # transformers fills them with random values and only prints a table
        raise ModelLoadError(f"the weights in {path} lack {len(missing)} of the model's tensors ({missing[0]}"
                             f"{', …' if len(missing) > 1 else ''}): it would run with random values there")
    tokenizer = load_tokenizer(str(path))
    check_tokenizer_fits(path, len(tokenizer), model.get_input_embeddings().num_embeddings)
    return model, tokenizer


def load_smollm2(dtype: torch.dtype = torch.float32):
    """Load the embedded default, converting the GGUF once into the cache directory
    (always as float32, whatever `dtype` this load asks for)."""
    converted = converted_smollm2()
    if converted is not None:
        return _load_dir(converted, dtype)
    from tqdm import tqdm
    AutoModelForCausalLM, AutoTokenizer = transformers_names("AutoModelForCausalLM", "AutoTokenizer")

    # NOTE: progress bars under a thread lock, not tqdm's default multiprocessing one: a
    # conversion stopped by Ctrl+C (its process killed) left that lock's semaphore to the
    # resource tracker, which warned of it at the gateway's exit
    tqdm.set_lock(threading.RLock())
    gguf = find_smollm2_gguf()
    with gguf_read_once():   # a third of the time transformers takes otherwise
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # NOTE: the model is fully dequantized to float32 already; drop the GGUF marker so
    # it saves as plain safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    save_conversion(model, tokenizer)
    return model.to(dtype), tokenizer


def save_conversion(model, tokenizer) -> Path:
    """Write the converted embedded model into a conversion directory, then rename it to
    `model_dir(EMBEDDED_MODEL)` (a half-written copy is never there); returns that.

    Invariant: every file of the copy has the mode this process's umask gives a new file
    (0644 under umask 022). safetensors writes its file 0600 whatever the umask, which left
    a copy converted once (by a platform team, in an image, on a shared volume) unreadable
    to every other user."""
    target = model_dir(EMBEDDED_MODEL)
    remove_abandoned_conversions()
    tmp = conversion_dir(os.getpid())
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    mode = new_file_mode()
    for path in tmp.rglob("*"):
        if path.is_file():
            path.chmod(mode)
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    return target


def new_file_mode() -> int:
    """The mode a file made now gets (0o666 less the umask), read from /proc on Linux; elsewhere
    by setting the umask and back (process-wide for that instant, harmless in a conversion)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split(":", 1)[1].strip(), 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def resolve_device(device: str) -> torch.device:
    """The torch device named by `device` ("cpu", "cuda", "cuda:N"); a clear
    ModelLoadError when it is malformed or absent on this machine."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"device {device!r} is not a torch device name (use 'cpu' or 'cuda[:N]')") from exc
    if resolved.type == "cpu":
        return resolved
    if resolved.type != "cuda":
        raise ModelLoadError(f"device {device!r} is not supported: use 'cpu' or 'cuda[:N]'")
    if not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for, but torch sees no CUDA GPU here")
    if resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ModelLoadError(f"device {device!r}: only {torch.cuda.device_count()} CUDA GPU(s) here")
    return resolved


def worker_device(device: str, worker_index: int, num_gpus: int) -> str:
    """The device worker `worker_index` uses: a bare "cuda" spreads workers over the
    `num_gpus` visible GPUs in turn (w0 on cuda:0, w1 on cuda:1, ...); any other name
    ("cpu", "cuda:N") is used as given by every worker."""
    if device != "cuda" or num_gpus <= 1:
        return device
    return f"cuda:{worker_index % num_gpus}"


DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
_CPU_BFLOAT16_PROBES = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")


def has_fast_bfloat16(device: str) -> bool:
    """Whether `device` computes in bfloat16 natively: a CUDA GPU that supports it, or a
    CPU with AMX tiles or AVX512-BF16, where torch's kernels multiply bfloat16 faster
    than float32 (elsewhere bfloat16 is converted on the fly and slower). The CPU probes
    are torch's own; a torch without them counts as no."""
    if str(device).startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in _CPU_BFLOAT16_PROBES)


def choose_dtype(dtype: str, model: str, device: str) -> str:
    """`dtype` itself, or for "auto": "bfloat16" where `device` computes it natively
    (`has_fast_bfloat16`), else "float32"; the test model 'tiny' is always "float32"
    (its matrices are too small to gain, and its tests compare float32 results)."""
    settled = dtype_without_probe(dtype, model)
    if settled is not None:
        return settled
    return "bfloat16" if has_fast_bfloat16(device) else "float32"


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype named by `dtype` ("float32", "bfloat16", "float16"; "auto" is
    settled first by `choose_dtype`)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise unsupported_dtype(dtype)
    return DTYPES[dtype]


def load_model(name: str = EMBEDDED_MODEL, dtype: str | torch.dtype = torch.float32,
               device: str = "cpu") -> LoadedModel:
    """Load a model by name ("smollm2", "tiny") or local directory path, in eval mode,
    with its weights (and so its KV cache) in `dtype` ("auto": `choose_dtype` for this
    device) on `device`."""
    target = resolve_device(device)
    if isinstance(dtype, str):
        dtype = choose_dtype(dtype, name, str(target))
    dtype = resolve_dtype(dtype)
    if name == TINY_MODEL:
        from shards.tiny_model import build_tiny_model

        model, tokenizer = build_tiny_model()
        model_id = TINY_MODEL
    elif name == EMBEDDED_MODEL:
        model, tokenizer = load_smollm2(dtype)
        model_id = SMOLLM2_MODEL_ID
    else:
        path = Path(name).expanduser()
        if not path.is_dir():
            raise ModelLoadError(
                f"model {name!r} is neither 'smollm2', 'tiny' nor a local model directory")
        model, tokenizer = _load_dir(path, dtype)
        model_id = path.name
    model.to(device=target, dtype=dtype)
    model.eval()
    avoid_per_length_attention_plans(target)
    if target.type == "cpu" and dtype is torch.bfloat16:
        from shards.single_row_linear import use_single_row_linears

        use_single_row_linears(model)  # one decode row: torch.mv beats oneDNN's bfloat16 path
    max_ctx = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    return LoadedModel(model, tokenizer, model_id, max_ctx)


def avoid_per_length_attention_plans(device: torch.device) -> None:
    """On a CUDA device, take cuDNN's kernel out of torch's choice for
    `scaled_dot_product_attention` (flash, memory-efficient and math kernels remain; the
    results are the same up to rounding). cuDNN builds an execution plan for each new
    sequence length, and every decode step is one: in fresh worker processes on an H200
    a bfloat16 decode step took 55-70 ms against 21 ms in float32 (which cuDNN does not
    run), the GPU 4-8% busy. Process-wide, like torch's thread count; elsewhere a no-op."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def load_model_files(name: str, device: str | None = None, dtype: str = AUTO_DTYPE) -> None:
    """Make sure a model can load fast in worker processes (converts the embedded GGUF
    once), after `check_model`. Call in the parent before starting workers, so they
    never race to convert."""
    check_model(name, device, dtype)
    if needs_conversion(name):
        load_smollm2()


def prepare_model(name: str, device: str | None, dtype: str) -> str:
    """`load_model_files`, then the dtype the workers on `device` load in ("auto"
    settled by `choose_dtype`; kept as given when `device` is None: each worker settles
    it where it runs)."""
    load_model_files(name, device, dtype)
    return dtype if device is None else choose_dtype(dtype, name, device)
