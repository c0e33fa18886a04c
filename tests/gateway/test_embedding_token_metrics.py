"""Embeddings' input tokens in `vllm:prompt_tokens_total` (QA97 finding 6): what the
registry records for them, and the `worker` each kind of embeddings call names there
("upstream" as an upstream chat, "gateway" for a local encoder run in the gateway's
process). The route that records them: the proposed diff to gateway/routes.py (FI18)."""
from __future__ import annotations

import asyncio

import torch

from gateway.embedding_model import EmbeddingModelConfig
from gateway.embeddings import EmbeddingsRequest, upstream_call
from gateway.local_embeddings import LocalEmbeddingBackend
from gateway.metrics import Registry


def test_embedding_tokens_count_as_prompt_tokens_and_nothing_else():
    registry = Registry()
    registry.record_embedding_tokens(tenant="a", model="enc", worker="gateway", num_input_tokens=12)
    registry.record_embedding_tokens(tenant="a", model="enc", worker="gateway", num_input_tokens=5)
    registry.record_embedding_tokens(tenant="a", model="up", worker="upstream", num_input_tokens=0)
    text = registry.render(tenant="a")
    assert 'vllm:prompt_tokens_total{tenant="a",model_name="enc",worker="gateway"} 17' in text
    assert 'model_name="up"' not in text   # a charge of nothing adds no series
    for other in ("vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:request_success_total",
                  "vllm:time_to_first_token_seconds"):
        assert other not in text
    assert registry.render(tenant="b").strip() == ""   # another tenant's scrape does not see them


def test_an_upstream_embeddings_call_names_the_upstream_worker():
    async def embed(request):
        raise AssertionError("not called")
    call = upstream_call(EmbeddingsRequest(model="up", input=["a b c"]), embed)
    assert call.worker == "upstream"


def test_a_local_embeddings_call_names_the_gateway_worker(tmp_path):
    from transformers import BertConfig, BertModel

    from gateway.local_embeddings import EMBEDDING_WORKER
    from shards.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(7)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=32)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    backend = LocalEmbeddingBackend(EmbeddingModelConfig(name="enc", path=str(tmp_path)))

    async def main():
        await backend.start()
        try:
            call = await backend.prepare_embeddings(EmbeddingsRequest(model="enc", input=["short", "two words"]))
            reply = await call.run()
        finally:
            await backend.stop()
        return call, reply
    call, reply = asyncio.run(main())
    assert EMBEDDING_WORKER == "gateway" and call.worker == EMBEDDING_WORKER
    assert call.num_reserved_tokens == reply["usage"]["prompt_tokens"] > 0
