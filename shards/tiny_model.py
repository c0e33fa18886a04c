"""A tiny, seeded, offline Llama and byte-level tokenizer for tests and quick benchmarks.

Same architecture family and the same code path as the real default model (Llama with
grouped-query attention and a ChatML chat template), but built from a config: no file,
no download. Weights are random but fixed by the seed, so every process that builds it
gets bit-identical weights — which lets several worker processes share one prefix cache
layout and lets tests compare logits across processes.
"""
from __future__ import annotations

TINY_SEED = 1234
# NOTE: `<tool_call>` is plain text (spelled in bytes), as in SmolLM2, so a detokenizer
# that skips special tokens still shows the tool-call tags to the gateway's parser.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def build_tiny_tokenizer():
    """Byte-level BPE with no merges: every byte is a token, plus ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from shards.transformers_names import transformers_names

    [PreTrainedTokenizerFast] = transformers_names("PreTrainedTokenizerFast")

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    from shards.chat_template import CHATML_TOOLS_TEMPLATE

    tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
    return tokenizer


def tiny_config(vocab_size: int):
    from shards.transformers_names import transformers_names

    [LlamaConfig] = transformers_names("LlamaConfig")

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )


def build_tiny_model():
    """(model, tokenizer) with weights fixed by TINY_SEED, in float32 eval mode."""
    import torch
    from shards.transformers_names import transformers_names

    [LlamaForCausalLM] = transformers_names("LlamaForCausalLM")

    tokenizer = build_tiny_tokenizer()
    vocab_size = ((len(tokenizer) + 63) // 64) * 64
    config = tiny_config(vocab_size)
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.eval()
    return model, tokenizer
