"""Prompt ids spliced from a tenant's earlier prompt equal a whole encode, always."""
from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from gateway.prompt_text_scan import shared_prefix_length
from gateway.prompt_token_cache import PromptTokenCache
from shards.tiny_model import build_tiny_tokenizer

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
WORDS = ["def", "return", "self", "path", "file", " the", " agent", "tool_call", "résumé", "naïve", "日本語",
         "🙂", "x*2", "    ", "\n", "{\"path\": \"src/x.py\"}", "error:", "  # comment", "Traceback", "ok"]


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A byte-level BPE trained here (merges across spaces, code and non-ASCII text), with
    chat special tokens: what splices could get wrong, unlike a byte tokenizer."""
    rng = random.Random(0)
    corpus = ["".join(rng.choice(WORDS) + rng.choice([" ", "", "\n"]) for _ in range(60)) for _ in range(400)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>",
                                   additional_special_tokens=SPECIALS)


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def _conversation(rng: random.Random, num_steps: int) -> list[str]:
    """The prompts of one agent session: each is the last one plus a reply and a tool result."""
    history = _turn("system", "You are an agent. " + " ".join(rng.choice(WORDS) for _ in range(30)))
    history += _turn("user", " ".join(rng.choice(WORDS) for _ in range(20)))
    prompts = []
    for _ in range(num_steps):
        prompts.append(history + "<|im_start|>assistant\n")
        history += _turn("assistant", "<tool_call>" + rng.choice(WORDS) + "</tool_call>")
        history += _turn("tool", "".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))))
    return prompts


@pytest.mark.parametrize("which", ["bpe", "tiny"])
def test_agent_steps_reuse_the_last_steps_ids_and_equal_a_whole_encode(bpe_tokenizer, which):
    tokenizer = bpe_tokenizer if which == "bpe" else build_tiny_tokenizer()
    cache = PromptTokenCache(tokenizer, check_every=1_000_000)   # only the first splices checked
    rng = random.Random(1)
    sessions = {tenant: _conversation(rng, 12) for tenant in ("a", "b")}
    for step in range(12):
        for tenant, prompts in sessions.items():
            assert cache.encode(tenant, prompts[step]) == tokenizer.encode(prompts[step], add_special_tokens=False)
    assert cache.stats.disabled is None
    assert cache.stats.num_encoded == 24 and cache.stats.num_spliced == 22   # all but each tenant's first
    whole = sum(len(tokenizer.encode(p, add_special_tokens=False)) for prompts in sessions.values() for p in prompts)
    assert cache.stats.num_reused_ids > whole // 2


def test_random_edits_and_orders_never_change_the_ids(bpe_tokenizer):
    tokenizer, rng = bpe_tokenizer, random.Random(2)
    cache = PromptTokenCache(tokenizer, entries_per_tenant=4, check_every=1_000_000)
    prompts = _conversation(rng, 8) + _conversation(rng, 8)
    for _ in range(150):
        text = rng.choice(prompts)
        if rng.random() < 0.5:   # an edit anywhere: inside a token, a word, a special token
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(WORDS + SPECIALS + ["<|im_", "|>"]) + text[at + rng.randint(0, 3):]
        assert cache.encode("t", text) == tokenizer.encode(text, add_special_tokens=False)
    assert cache.stats.num_spliced > 50 and cache.stats.disabled is None


def test_a_tenant_never_splices_from_another_tenants_prompt(bpe_tokenizer):
    cache = PromptTokenCache(bpe_tokenizer)
    prompt = _conversation(random.Random(3), 2)[1]
    cache.encode("a", prompt)
    assert cache.encode("b", prompt) == bpe_tokenizer.encode(prompt, add_special_tokens=False)
    assert cache.stats.num_spliced == 0
    cache.encode("a", prompt)
    assert cache.stats.num_spliced == 1


def test_the_cache_keeps_at_most_its_bounds(bpe_tokenizer):
    cache = PromptTokenCache(bpe_tokenizer, entries_per_tenant=3, max_entries=5)
    for tenant in ("a", "b", "c"):
        for session in range(4):   # each session's first prompt: none continues another
            cache.encode(tenant, _conversation(random.Random(f"{tenant}{session}"), 1)[0])
    kept = [tenant for tenant, _ in cache._entries]
    assert kept == ["b", "b", "c", "c", "c"]   # oldest first; per tenant at most 3
    assert {tenant: len(keys) for tenant, keys in cache._per_tenant.items()} == {"b": 2, "c": 3}


def test_an_agents_next_prompt_takes_the_place_of_the_one_it_continues(bpe_tokenizer):
    cache = PromptTokenCache(bpe_tokenizer)
    sessions = [_conversation(random.Random(session), 6) for session in range(3)]
    for step in range(6):
        for prompts in sessions:
            assert cache.encode("t", prompts[step]) == bpe_tokenizer.encode(prompts[step], add_special_tokens=False)
    assert [entry.text for entry in cache._entries.values()] == [prompts[-1] for prompts in sessions]
    assert cache.stats.num_spliced == 3 * 6 - 1   # the sessions share their tenant's system prompt


def test_a_tenant_alone_keeps_a_prompt_per_session_and_finds_the_one_each_step_continues(bpe_tokenizer):
    cache = PromptTokenCache(bpe_tokenizer, entries_per_tenant=4, max_entries=64)
    sessions = [_conversation(random.Random(session), 3) for session in range(40)]   # more than SCANNED_ENTRIES
    for step in range(3):
        for prompts in sessions:   # round robin: the prompt a step continues is the tenant's oldest
            assert cache.encode("t", prompts[step]) == bpe_tokenizer.encode(prompts[step], add_special_tokens=False)
    assert [entry.text for entry in cache._entries.values()] == [prompts[-1] for prompts in sessions]
    assert sum(len(keys) for keys in cache._by_last_cut.values()) == 40


def test_tenants_share_the_entries_and_none_keeps_fewer_than_the_floor(bpe_tokenizer):
    cache = PromptTokenCache(bpe_tokenizer, entries_per_tenant=2, max_entries=12)
    first_prompts = {tenant: [_conversation(random.Random(f"{tenant}{n}"), 1)[0] for n in range(12)]
                     for tenant in "abcdefgh"}
    for prompt in first_prompts["a"]:
        cache.encode("a", prompt)
    assert len(cache._per_tenant["a"]) == 12   # alone: all of max_entries
    for prompt in first_prompts["b"]:
        cache.encode("b", prompt)
    assert {tenant: len(keys) for tenant, keys in cache._per_tenant.items()} == {"a": 6, "b": 6}
    for tenant in "cdefgh":
        for prompt in first_prompts[tenant][:3]:
            cache.encode(tenant, prompt)
    assert len(cache._entries) == 12 and len(cache._per_tenant["h"]) == 2   # the share is 12 // 8 = 1: the floor


def test_the_cache_keeps_at_most_its_byte_budget(bpe_tokenizer):
    prompts = _conversation(random.Random(7), 6)
    budget = 3 * len(prompts[2]) * 2   # room for a few short prompts, not for the long ones
    cache = PromptTokenCache(bpe_tokenizer, max_bytes=budget)
    for prompt in prompts:
        assert cache.encode("t", prompt) == bpe_tokenizer.encode(prompt, add_special_tokens=False)
        assert 0 < cache._num_bytes <= budget
    huge = PromptTokenCache(bpe_tokenizer, max_bytes=len(prompts[0]) // 2)   # no prompt fits
    for prompt in prompts:
        huge.encode("t", prompt)
    assert not huge._entries and huge._num_bytes == 0 and huge.stats.num_spliced == 0


def test_a_splice_that_differs_from_a_whole_encode_turns_the_cache_off(bpe_tokenizer, monkeypatch):
    cache = PromptTokenCache(bpe_tokenizer)
    first, second = _conversation(random.Random(4), 2)
    cache.encode("t", first)
    real_encode = bpe_tokenizer.encode
    monkeypatch.setattr(bpe_tokenizer, "encode", lambda text, **kw: real_encode(text, **kw)[:-1] + [0])
    assert cache.encode("t", second) == bpe_tokenizer.encode(second, add_special_tokens=False)   # the reference's answer
    assert cache.stats.disabled == "a spliced prompt differed from its whole encode" and not cache._entries


def test_added_tokens_that_strip_spaces_turn_splicing_off(bpe_tokenizer):
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(bpe_tokenizer.backend_tokenizer.to_str()))
    from tokenizers import AddedToken
    tokenizer.add_special_tokens({"additional_special_tokens": [AddedToken("<|im_end|>", rstrip=True, lstrip=True)]})
    cache = PromptTokenCache(tokenizer)
    assert cache.stats.disabled is None   # the other added tokens still cut cleanly
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") not in cache._cut_token_ids
    for prompt in _conversation(random.Random(5), 4):
        assert cache.encode("t", prompt) == tokenizer.encode(prompt, add_special_tokens=False)


def test_the_shared_prefix_length_is_exact():
    rng = random.Random(6)
    for _ in range(600):
        size = rng.choice((12, 3000, 20000))   # within the first window, and across several
        a = "".join(rng.choice("ab🙂") for _ in range(rng.randint(0, size)))
        b = a[:rng.randint(0, len(a))] + "".join(rng.choice("ab🙂") for _ in range(rng.randint(0, 5)))
        expected = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert shared_prefix_length(a, b) == expected


def test_with_special_tokens_it_answers_as_encode_does_and_a_bos_adding_tokenizer_is_asked_whole(bpe_tokenizer):
    from tokenizers import processors

    prompts = _conversation(random.Random(8), 3)
    plain = PromptTokenCache(bpe_tokenizer)
    for prompt in prompts:   # this tokenizer adds nothing: the splice serves here too
        assert plain.encode("t", prompt, add_special_tokens=True) == bpe_tokenizer.encode(prompt)
    assert plain.stats.num_spliced == 2
    backend = Tokenizer.from_str(bpe_tokenizer.backend_tokenizer.to_str())
    bos = backend.token_to_id("<|endoftext|>")
    backend.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                            special_tokens=[("<|endoftext|>", bos)])
    with_bos = PreTrainedTokenizerFast(tokenizer_object=backend)
    cache = PromptTokenCache(with_bos)
    for prompt in prompts:
        ids = cache.encode("t", prompt, add_special_tokens=True)
        assert ids == with_bos.encode(prompt) and ids[0] == bos
        assert cache.encode("t", prompt) == with_bos.encode(prompt, add_special_tokens=False)
    assert cache.stats.num_encoded == 3   # only the calls without special tokens went through it
