"""Local embedding models (`kind = "embedding"`) at their edges: loads side by side keep
each model's dtype, texts the tokenizer makes no token of, directories without a
tokenizer, tokenizers larger than the model's embedding matrix; and upstream vectors
past float32's range or usage without a prompt count (`embeddings.upstream_reply`).
Tiny BERTs built from a config in the test, never downloaded."""
from __future__ import annotations

import asyncio
import shutil
import threading

import pytest
import torch

from gateway.config import key_digest, parse_config
from gateway.embedding_model import EmbeddingModelConfig
from gateway.embeddings import EmbeddingsRequest, reply_body, upstream_reply
from gateway.errors import ApiError
from gateway.local_embeddings import EmbeddingModelError, LocalEmbeddingBackend
from gateway.serve_command import local_model_problem

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "hello", "world"]


def wordpiece_tokenizer():
    """A BERT-like WordPiece tokenizer that adds no special tokens (no post-processor):
    whitespace alone tokenizes to nothing."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordPiece({word: i for i, word in enumerate(WORDS)}, unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def save_encoder(path, vocab_size: int, dtype=torch.float32, tokenizer=None):
    from transformers import BertConfig, BertModel

    torch.manual_seed(11)
    model = BertModel(BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=64, pad_token_id=0))
    model.to(dtype).save_pretrained(path)
    (tokenizer or wordpiece_tokenizer()).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-loads")
    return {"fp32": save_encoder(root / "fp32", len(WORDS)),
            "fp16": save_encoder(root / "fp16", len(WORDS), torch.float16),
            "bf16": save_encoder(root / "bf16", len(WORDS), torch.bfloat16),
            "wide": save_encoder(root / "wide", 64),   # 64 rows, a tokenizer of len(WORDS) ids
            "root": root}


def started(*paths) -> list[LocalEmbeddingBackend]:
    backends = [LocalEmbeddingBackend(EmbeddingModelConfig(name=f"e{n}", path=str(path)))
                for n, path in enumerate(paths)]

    async def start_all() -> None:   # side by side, as gateway/app.py's start_all starts them
        await asyncio.gather(*(backend.start() for backend in backends))

    asyncio.run(start_all())
    return backends


def embed(backend: LocalEmbeddingBackend, value) -> dict:
    return asyncio.run(backend.embed(EmbeddingsRequest(model=backend.model_id, input=value, encoding_format="float")))


def refusal(backend: LocalEmbeddingBackend, value) -> ApiError:
    with pytest.raises(ApiError) as caught:
        embed(backend, value)
    return caught.value


def test_embedding_models_load_one_at_a_time(models, monkeypatch):
    """Known failure (QA106): every model loaded on its own thread at once, and
    transformers sets torch's process-wide default dtype while it builds one: a float32
    model beside a float16 one came out partly float16 (3 starts of 4), then 500s."""
    from transformers import AutoModel

    load = AutoModel.from_pretrained
    inside, most, entered = [0], [0], threading.Event()
    count = threading.Lock()

    def watched(*args, **kwargs):
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            if inside[0] > 1:
                entered.set()
        entered.wait(1.0)   # a load beside this one, if loads overlap, enters meanwhile
        try:
            return load(*args, **kwargs)
        finally:
            with count:
                inside[0] -= 1

    monkeypatch.setattr(AutoModel, "from_pretrained", watched)
    backends = started(models["fp32"], models["fp16"])
    assert most[0] == 1
    assert all(backend.health()["ready"] for backend in backends)


def test_models_loaded_side_by_side_keep_their_own_dtypes_and_serve(models):
    backends = started(models["fp32"], models["fp16"], models["bf16"], models["fp32"])
    for backend, dtype in zip(backends, (torch.float32, torch.float16, torch.bfloat16, torch.float32)):
        assert {parameter.dtype for parameter in backend._model.parameters()} == {dtype}, backend.model_id
        reply = embed(backend, ["hello world", "abc"])
        assert len(reply["data"]) == 2 and len(reply["data"][0]["embedding"]) == 16


def test_a_model_built_in_the_wrong_dtype_is_refused(models, monkeypatch):
    """Whatever ran beside a load, a model whose parameters are not of its config's dtype
    never serves (it would fail every request with "mixed dtype", or answer silently worse)."""
    from transformers import AutoModel

    load = AutoModel.from_pretrained

    def half_built(*args, **kwargs):
        model = load(*args, **kwargs)
        model.pooler.dense.to(torch.float16)   # as a float16 load beside it left it
        return model

    monkeypatch.setattr(AutoModel, "from_pretrained", half_built)
    with pytest.raises(EmbeddingModelError, match="not of its dtype torch.float32"):
        started(models["fp32"])


@pytest.mark.parametrize("value, index", [("   ", 0), ("\u200b", 0), (["hello", " "], 1), (["a", "b", "\t\n"], 2)])
def test_a_text_of_no_tokens_is_a_400_naming_its_input(models, value, index):
    """Known failure (QA106): a tokenizer adding no special tokens gave an empty id list,
    and `max([])` made the whole request a 500."""
    [backend] = started(models["fp32"])
    error = refusal(backend, value)
    assert (error.status, error.param, error.code) == (400, "input", "invalid_value")
    assert f"Input {index} has no tokens" in error.message
    assert len(embed(backend, "hello")["data"]) == 1


def test_a_directory_without_tokenizer_files_is_refused_at_start(models, tmp_path):
    """Known failure (QA106): transformers 5 built a tokenizer of special tokens only, so
    every word was [UNK] and every text got the same vector, silently."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(models["fp32"] / name, bare / name)
    config = parse_config({"models": [{"name": "bare", "kind": "embedding", "path": str(bare)}],
                           "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-embedding-loads")]}]})
    problem = local_model_problem(config)
    assert problem is not None and problem.startswith("cannot serve model 'bare':") and "no tokenizer" in problem
    with pytest.raises(EmbeddingModelError, match="no tokenizer"):
        started(bare)


def test_a_tokenizer_of_special_tokens_only_is_refused_at_start(models, tmp_path):
    """Only a tokenizer_config.json: transformers builds the model type's tokenizer with
    an empty vocabulary."""
    bare = tmp_path / "config-only"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        shutil.copy(models["fp32"] / name, bare / name)
    (bare / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
    with pytest.raises(EmbeddingModelError, match="knows only its special tokens"):
        started(bare)


def test_a_tokenizer_with_ids_past_the_embedding_matrix_is_refused_at_start(tmp_path):
    """Known failure (QA106): a 259-id tokenizer on a 200-row model served, and text with
    the ids past 199 was a 500 (IndexError): the check used the tokenizer's size."""
    from shards.tiny_model import build_tiny_tokenizer

    path = save_encoder(tmp_path / "small", 200, tokenizer=build_tiny_tokenizer())
    with pytest.raises(EmbeddingModelError, match="has 259 token ids, but the model embeds only 200"):
        started(path)


def test_token_ids_are_checked_against_the_models_own_vocabulary(models):
    """The model embeds 64 ids while its tokenizer knows fewer: 63 is a token the model
    has (it was a 400 naming the tokenizer's size), 64 is past it."""
    [backend] = started(models["wide"])
    assert len(embed(backend, [[len(WORDS), 63]])["data"]) == 1
    error = refusal(backend, [[1, 64]])
    assert (error.status, error.param) == (400, "input") and "vocabulary of 64" in error.message


@pytest.mark.parametrize("value", [1e300, -1e39, 3.5e38])
def test_an_upstream_value_past_float32_is_a_502(value):
    """Known failure (QA106): 1e300 passed the finite check; `float` gave 1e300 and
    `base64` packed float32 inf, so the two encodings disagreed."""
    with pytest.raises(ApiError) as caught:
        upstream_reply({"data": [{"embedding": [0.5, value]}], "usage": {"prompt_tokens": 2}}, 1)
    assert (caught.value.status, caught.value.code) == (502, "upstream_error")
    largest = float(torch.finfo(torch.float32).max)
    body = reply_body(upstream_reply({"data": [{"embedding": [0.5, largest]}]}, 1), "m")
    assert body["data"][0]["embedding"] == [0.5, largest]


def test_an_upstream_usage_with_only_a_total_counts_it_as_prompt_tokens():
    """Known failure (QA106): `{"total_tokens": 9}` was reported as prompt_tokens 0."""
    reply = upstream_reply({"data": [{"embedding": [0.5]}], "usage": {"total_tokens": 9}}, 1)
    assert reply["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert reply_body(reply, "m")["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert reply_body({"data": [], "usage": {"total_tokens": 4}}, "m")["usage"] == {"prompt_tokens": 4,
                                                                                   "total_tokens": 4}
