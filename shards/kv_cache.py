"""The model-side KV cache of one running request: grows in place, no copy per token.

transformers' default dynamic layer appends by concatenation, which copies the whole
cache on every decode step and once more when a cache is built from stored tensors.
`GrowableLayer` keeps a buffer with headroom: a cache assembled from the arena starts as
a zero-copy view, the first forward copies it once into a buffer with room to grow, and
decode steps write one token in place. Invariant: `keys`/`values` are always exactly the
valid `[batch, heads, num_tokens, head_dim]` prefix of the buffer (or of the view).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_HEADROOM_TOKENS = 256


class GrowableLayer(DynamicLayer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def adopt(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Start from existing tensors without copying them (they are only read)."""
        self.device = keys.device
        self.keys, self.values = keys, values
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        num_old = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        num_new = key_states.shape[-2]
        total = num_old + num_new
        if self._key_buffer is None or total > self._key_buffer.shape[-2]:
            capacity = total + max(MIN_HEADROOM_TOKENS, total // 4)
            shape = (*key_states.shape[:2], capacity, key_states.shape[-1])
            key_buffer = torch.empty(shape, dtype=key_states.dtype, device=key_states.device)
            value_buffer = torch.empty(shape, dtype=value_states.dtype, device=value_states.device)
            if num_old:
                key_buffer[:, :, :num_old].copy_(self.keys)
                value_buffer[:, :, :num_old].copy_(self.values)
            self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self._key_buffer[:, :, num_old:total].copy_(key_states)
        self._value_buffer[:, :, num_old:total].copy_(value_states)
        self.keys = self._key_buffer[:, :, :total]
        self.values = self._value_buffer[:, :, :total]
        return self.keys, self.values


def make_cache(config, layer_kvs: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
    """A model cache of GrowableLayers, adopting `layer_kvs` (no copy) when given."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowableLayer() for _ in range(config.num_hidden_layers)]
    if layer_kvs is not None:
        for layer, (k, v) in zip(cache.layers, layer_kvs):
            layer.adopt(k, v)
    return cache
