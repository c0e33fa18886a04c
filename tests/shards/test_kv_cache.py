from __future__ import annotations

import torch
from transformers import DynamicCache

from shards.kv_cache import GrowableLayer, make_cache


def test_make_cache_decode_equals_default_dynamic_cache(tiny_loaded):
    model = tiny_loaded.model
    ids = torch.randint(0, 250, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full = model(ids, cache=DynamicCache(config=model.config), use_cache=True)
        kv = [(layer.keys[:, :, :30], layer.values[:, :, :30]) for layer in full.cache.layers]
        before = [k.clone() for k, _ in kv]
        ours = make_cache(model.config, kv)
        theirs = DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in kv], config=model.config)
        for position in range(30, 40):  # one token at a time, as decode does
            token, pos = ids[:, position:position + 1], torch.tensor([[position]])
            a = model(token, cache=ours, position_ids=pos, use_cache=True).logits
            b = model(token, cache=theirs, position_ids=pos, use_cache=True).logits
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        torch.testing.assert_close(a[0, -1], full.logits[0, -1], atol=1e-4, rtol=0)
    assert all(torch.equal(k, b) for (k, _), b in zip(kv, before))  # adopted tensors never written
    assert ours.get_seq_length() == 40


def test_growable_layer_grows_past_capacity_keeping_content():
    layer = GrowableLayer()
    chunks = [torch.randn(1, 2, n, 4) for n in (5, 300, 1, 700)]
    for chunk in chunks:
        keys, _ = layer.update(chunk, chunk)
    assert torch.equal(keys, torch.cat(chunks, dim=-2))
