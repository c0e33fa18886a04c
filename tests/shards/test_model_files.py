"""Model names, files and the tokenizer without torch: what the gateway's own process
needs of a model, tested against transformers' AutoTokenizer and in a fresh interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from shards.model_files import (ModelLoadError, check_dtype_name, conversion_dir, load_tokenizer, model_dir,
                                needs_torch_to_prepare, remove_abandoned_conversions)
from shards.tiny_model import build_tiny_tokenizer

REPO = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "system", "content": "You help."},
            {"role": "user", "content": "héllo <|im_end|> wörld 😀\n\n  x"}]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    build_tiny_tokenizer().save_pretrained(path)
    return path


def test_a_generic_tokenizer_directory_loads_the_same_tokenizer_as_autotokenizer(tokenizer_dir):
    assert json.loads((tokenizer_dir / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
    ours, auto = load_tokenizer(str(tokenizer_dir)), AutoTokenizer.from_pretrained(tokenizer_dir)
    text = MESSAGES[1]["content"]
    assert ours.encode(text) == auto.encode(text) and len(ours.encode(text)) > 10
    assert ours.encode(text, add_special_tokens=False) == auto.encode(text, add_special_tokens=False)
    assert (len(ours), ours.all_special_ids, ours.eos_token_id) == (len(auto), auto.all_special_ids, auto.eos_token_id)
    rendered = ours.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == auto.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")


def test_a_model_specific_tokenizer_class_goes_through_autotokenizer(tokenizer_dir, tmp_path):
    for name in ("tokenizer.json", "chat_template.jinja"):
        (tmp_path / name).write_bytes((tokenizer_dir / name).read_bytes())
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(config, tokenizer_class="GPT2Tokenizer")))
    tokenizer = load_tokenizer(str(tmp_path))
    assert type(tokenizer) is type(AutoTokenizer.from_pretrained(tmp_path))
    assert type(tokenizer).__name__.startswith("GPT2Tokenizer")


def test_torch_is_needed_only_to_convert_the_gguf_or_to_ask_a_device_about_auto(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path))   # nothing converted there
    assert model_dir("smollm2") == tmp_path / "models" / "smollm2-135m-instruct"
    assert needs_torch_to_prepare("smollm2", "cpu", "float32")        # the conversion
    assert needs_torch_to_prepare("/models/llama", "cpu", "auto")     # the device's bfloat16 probe
    assert not needs_torch_to_prepare("/models/llama", "cpu", "bfloat16")
    assert not needs_torch_to_prepare("tiny", "cpu", "auto")          # 'tiny' is always float32
    assert not needs_torch_to_prepare("/models/llama", None, "auto")  # Ray workers settle it
    check_dtype_name("auto")
    with pytest.raises(ModelLoadError, match="dtype 'int4' is not supported: use 'auto' or one of"):
        check_dtype_name("int4")


def test_only_the_conversions_of_processes_gone_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    abandoned, running = conversion_dir(int(gone.stdout)), conversion_dir(os.getpid())
    assert abandoned.name == f"smollm2-135m-instruct.tmp{int(gone.stdout)}"
    for directory in (abandoned, running, model_dir("smollm2")):
        directory.mkdir(parents=True)
        (directory / "model.safetensors").write_bytes(b"half written")
    assert remove_abandoned_conversions() == [abandoned]
    assert not abandoned.exists()
    assert (running / "model.safetensors").is_file()   # a conversion under way is left to finish
    assert (model_dir("smollm2") / "model.safetensors").is_file()


def test_the_gateway_process_checks_a_model_and_loads_its_tokenizer_without_torch():
    script = textwrap.dedent("""
        import sys
        import gateway.app, gateway.serve_command, shards.engine
        from shards.model_files import check_model, load_tokenizer
        check_model("tiny", "cpu", "auto")
        tokenizer = load_tokenizer("tiny")
        assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        print(sorted(name for name in sys.modules if name == "torch" or name.startswith("torch.")))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_safetensors_complete_known_answers(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    from shards.model_files import safetensors_complete

    whole = tmp_path / "whole.safetensors"
    save_file({"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 3), dtype=np.float16)}, str(whole))
    assert safetensors_complete(whole)
    data = whole.read_bytes()
    for name, content in (("short", data[:-1]), ("longer", data + b"\0"), ("header only", data[:40]),
                          ("empty", b""), ("text", b"not a safetensors file at all")):
        path = tmp_path / name
        path.write_bytes(content)
        assert not safetensors_complete(path), name
    assert not safetensors_complete(tmp_path / "missing")
    empty_model = tmp_path / "no tensors.safetensors"
    save_file({}, str(empty_model))
    assert safetensors_complete(empty_model)


def _converted_copy(tmp_path: Path, monkeypatch, *, num_weights: int) -> Path:
    """A converted copy of the embedded model in a cache directory of its own: its weights' path."""
    import numpy as np
    from safetensors.numpy import save_file

    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path))
    converted = model_dir("smollm2")
    converted.mkdir(parents=True)
    weights = converted / "model.safetensors"
    save_file({"w": np.zeros(num_weights, dtype=np.float32)}, str(weights))
    (converted / "tokenizer.json").write_text("{}")
    return weights


def test_a_converted_copy_cut_short_counts_as_not_converted(tmp_path, monkeypatch):
    from shards.model_files import converted_smollm2, needs_conversion

    weights = _converted_copy(tmp_path, monkeypatch, num_weights=1000)
    assert converted_smollm2() == weights.parent and not needs_conversion("smollm2")
    with open(weights, "r+b") as stream:
        stream.truncate(weights.stat().st_size - 100)
    assert converted_smollm2() is None and needs_conversion("smollm2")


def _llama_dir(tmp_path: Path, *, vocab_size: int, drop: str | None = None) -> Path:
    """The tiny model's architecture with random weights and its tokenizer, saved to a
    directory; `drop`: the tensors whose names hold it are left out of the weights."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import LlamaForCausalLM

    from shards.tiny_model import tiny_config

    path = tmp_path / f"llama-{vocab_size}-{drop}"
    torch.manual_seed(0)
    LlamaForCausalLM(tiny_config(vocab_size)).save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    if drop is not None:
        weights = load_file(path / "model.safetensors")
        save_file({name: tensor for name, tensor in weights.items() if drop not in name}, path / "model.safetensors",
                  metadata={"format": "pt"})
    return path


def test_a_model_directory_that_would_serve_wrongly_is_refused_in_one_line(tmp_path):
    """Weights that lack tensors (transformers fills them with random values and only
    prints a table) and a tokenizer with ids the model cannot embed (every chat failed
    with a 503 'index out of range' while /health said ready) fail the worker's load."""
    import torch

    from shards.model_loader import _load_dir

    tokens = len(build_tiny_tokenizer())
    model, _ = _load_dir(_llama_dir(tmp_path, vocab_size=tokens), torch.float32)   # the whole model loads
    assert model.get_input_embeddings().num_embeddings == tokens
    with pytest.raises(ModelLoadError, match=r"lack 9 of the model's tensors \(model\.layers\.1\.[a-z_.]+, …\): "
                                             "it would run with random values there"):
        _load_dir(_llama_dir(tmp_path, vocab_size=tokens, drop="layers.1."), torch.float32)
    with pytest.raises(ModelLoadError, match=f"has {tokens} token ids, but the model embeds only 159"):
        _load_dir(_llama_dir(tmp_path, vocab_size=159), torch.float32)


def test_a_kv_cache_too_large_for_memory_is_refused_saying_what_to_lower():
    import torch

    from cache.kv_arena import KVLayout
    from shards.kv_memory import kv_arena
    from shards.tiny_model import tiny_config

    layout = KVLayout.for_model_config(tiny_config(300), 16, torch.float32)
    with pytest.raises(ModelLoadError, match=r"the KV cache's hot tier of 1,000,000,000 blocks \(7,629\.4 GiB\) "
                                             r"cannot be allocated: lower num_hot_blocks \(--hot-blocks\)"):
        kv_arena(layout, 10**9, "hot", device=torch.device("cpu"))


def test_a_model_whose_config_names_no_attention_heads_as_llama_does_is_refused_in_one_line():
    from transformers import GPT2Config, GPT2LMHeadModel

    from shards.model_loader import LoadedModel
    from shards.model_runner import ModelRunner

    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=300, n_positions=64)).eval()
    with pytest.raises(ModelLoadError, match=r"gpt2x holds a GPT2LMHeadModel \('GPT2Config' object has no attribute "
                                             r"'num_key_value_heads'\) model, which the engine cannot serve"):
        ModelRunner(LoadedModel(model, build_tiny_tokenizer(), "gpt2x", 64), num_hot_blocks=8)


def test_a_converted_copy_this_user_may_not_read_is_a_one_line_model_error_not_an_incomplete_copy(tmp_path,
                                                                                                     monkeypatch):
    """A copy another user converted, its weights 0600: it was called incomplete and
    converted again, which failed on the directory it could not write (exit 3, a
    PermissionError on a temporary directory, after 15-80 s of CPU)."""
    import builtins

    from shards import model_files
    from shards.model_files import check_model, converted_smollm2, needs_conversion

    weights = _converted_copy(tmp_path, monkeypatch, num_weights=10)
    converted = weights.parent
    assert converted_smollm2() == converted

    def refusing_open(path, *args, **kwargs):   # as for another user's 0600 file (root may read any file)
        if Path(path) == weights:
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(model_files, "open", refusing_open, raising=False)
    for call in (converted_smollm2, lambda: needs_conversion("smollm2"), lambda: check_model("smollm2")):
        with pytest.raises(ModelLoadError) as failed:
            call()
        assert str(failed.value) == (
            f"the converted copy of the embedded model {weights} cannot be read: PermissionError: [Errno 13] "
            f"Permission denied: '{weights}' (let this user read it, or set $STEPAHEAD_CACHE_DIR to a directory "
            "of its own)")
    assert sorted(p.name for p in tmp_path.joinpath("models").iterdir()) == ["smollm2-135m-instruct"]


def test_a_cache_directory_it_cannot_write_fails_the_check_before_any_conversion(tmp_path, monkeypatch):
    """It failed only after the conversion (15-80 s of CPU), on renaming into place."""
    from shards import model_files
    from shards.model_files import check_model, model_cache_dir

    monkeypatch.setattr(model_files, "find_smollm2_gguf", lambda: tmp_path / "model.gguf")   # installed or not
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(ModelLoadError) as failed:
        check_model("smollm2")
    message = str(failed.value)
    assert message.startswith(f"the embedded model cannot be converted into the cache directory "
                              f"{tmp_path / 'a-file' / 'cache' / 'models'}: NotADirectoryError: ")
    assert message.endswith("(set $STEPAHEAD_CACHE_DIR to a directory this user can write)") and "\n" not in message
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path / "cache"))
    check_model("smollm2")   # a place it can write: made, tried, and left empty
    assert list(model_cache_dir().iterdir()) == []


def test_a_tilde_in_the_cache_directory_means_the_home_directory(tmp_path, monkeypatch):
    """As in every other STEPAHEAD_* path: a systemd Environment= or an env file leaves the
    `~` to the program, and a directory named `~` appeared in the working directory."""
    from shards.model_files import model_cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", "~/sa-cache")
    assert model_cache_dir() == tmp_path / "sa-cache" / "models"
    assert model_dir("smollm2") == tmp_path / "sa-cache" / "models" / "smollm2-135m-instruct"
