"""Token-id prompts rebuilt from a trace's block hash ids (shared/TRACE_FORMAT.md).

Block `i` of tenant `T` becomes `block_size` token ids drawn from a PRNG seeded by
(T, i), so two requests that share their first k hash ids share their first
k * block_size tokens — and so their KV-cache prefix — and nothing else does. A partial
last block takes the first tokens of its block's stream. Without hash ids, tokens are
made deterministic from (tenant, session, position), so consecutive steps of one session
extend each other; a line with neither hash ids nor a session shares nothing, as the
simulator reads it (cache/sim/requests.py): its tokens are drawn from its own place in the
trace (its request index, and its `t`), so lines at equal times are different prompts.
"""
from __future__ import annotations

import hashlib
import random

from cache.trace_format import TraceRecord

DEFAULT_FIRST_TOKEN_ID = 3  # skip the lowest ids, often special tokens
MIN_VOCAB_SIZE = DEFAULT_FIRST_TOKEN_ID + 2   # at least two ids to draw from


def _seed(*parts: object) -> int:
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class PromptBuilder:
    """Turns trace records into token-id prompts; caches each block's tokens."""

    def __init__(self, block_size: int, vocab_size: int, max_input_tokens: int | None = None,
                 first_token_id: int = DEFAULT_FIRST_TOKEN_ID):
        if vocab_size <= first_token_id + 1:
            raise ValueError(f"vocab_size must exceed {first_token_id + 1}")
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.first_token_id = first_token_id
        self.max_input_tokens = max_input_tokens
        self._blocks: dict[tuple[str, int], list[int]] = {}

    def _block(self, tenant: str, hash_id: int) -> list[int]:
        key = (tenant, hash_id)
        tokens = self._blocks.get(key)
        if tokens is None:
            tokens = self._drawn(self.block_size, "block", tenant, hash_id)
            self._blocks[key] = tokens
        return tokens

    def _drawn(self, num_tokens: int, *seed_parts: object) -> list[int]:
        """`num_tokens` token ids from the stream seeded by `seed_parts` (its first ones)."""
        rng = random.Random(_seed(*seed_parts))
        return [rng.randrange(self.first_token_id, self.vocab_size) for _ in range(num_tokens)]

    def prompt(self, record: TraceRecord, request_index: int | None = None) -> list[int]:
        """The token ids of `record`'s prompt (cut to max_input_tokens, keeping the head).
        `request_index`, the record's place in the trace (0 for its first request), is
        needed for a record with neither `hash_ids` nor a session: its tokens are its own."""
        num_tokens = record.input_tokens
        if self.max_input_tokens is not None:
            num_tokens = min(num_tokens, self.max_input_tokens)
        num_tokens = max(1, num_tokens)
        if record.hash_ids:
            tokens: list[int] = []
            for hash_id in record.hash_ids:
                if len(tokens) >= num_tokens:
                    break
                tokens.extend(self._block(record.tenant, hash_id))
            return tokens[:num_tokens]
        if record.session is not None:
            return self._drawn(num_tokens, "session", record.tenant, record.session)
        if request_index is None:
            raise ValueError("a record with neither hash_ids nor a session needs its request_index")
        return self._drawn(num_tokens, "request", record.tenant, request_index, record.t)
