"""A prompt certainly past the context is refused before it is tokenized, and tokenizing
one costs a pass over the text it tokenizes (QA134 H0: a 20-item conversation of 8 MB took
16-31 s and 2-3 GB of gateway memory before its 400)."""
from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from gateway.errors import ApiError, context_length_exceeded
from gateway.prompt_bounds import PromptBound, prompt_past_context
from gateway.prompt_token_cache import PromptTokenCache
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from shards.special_text import SpecialText
from shards.tiny_model import build_tiny_tokenizer
from tests.gateway.local_stand_ins import EngineFacts, bare_local_backend

CONTEXT = 8192


class _CountingEncoding:
    """An `Encoding` that records whether its per-token offsets list was built."""

    def __init__(self, encoding, counts: dict) -> None:
        self._encoding, self._counts = encoding, counts

    @property
    def offsets(self):
        self._counts["offsets_lists"] += 1
        return self._encoding.offsets

    def __getattr__(self, name):
        return getattr(self._encoding, name)


class _CountingBackend:
    def __init__(self, backend, counts: dict) -> None:
        self._backend, self._counts = backend, counts

    def encode(self, text, *args, **kwargs):
        self._counts["encodes"] += 1
        self._counts["chars"] += len(text)
        return _CountingEncoding(self._backend.encode(text, *args, **kwargs), self._counts)

    def encode_batch(self, texts, *args, **kwargs):   # what the cache calls: it lets go of the GIL (FI157)
        self._counts["encodes"] += len(texts)
        self._counts["chars"] += sum(map(len, texts))
        encodings = self._backend.encode_batch(texts, *args, **kwargs)
        return [_CountingEncoding(encoding, self._counts) for encoding in encodings]

    def __getattr__(self, name):
        return getattr(self._backend, name)


class CountingTokenizer:
    """A tokenizer that counts its encodes and the characters they took (`counts`):
    `encode` (a whole encode) apart from its backend's (what the prompt cache tokenizes)."""

    def __init__(self, tokenizer) -> None:
        self.counts = {"encodes": 0, "chars": 0, "offsets_lists": 0, "whole_encodes": 0}
        self._tokenizer = tokenizer
        self.backend_tokenizer = _CountingBackend(tokenizer.backend_tokenizer, self.counts)

    def encode(self, text, *args, **kwargs):
        self.counts["whole_encodes"] += 1
        return self._tokenizer.encode(text, *args, **kwargs)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _backend(counting: CountingTokenizer, tokenizer):
    return bare_local_backend(EngineFacts(True, CONTEXT, tokenizer), prompt_tokens=PromptTokenCache(counting))


def _huge_chat(**fields) -> ChatCompletionRequest:
    # 20 messages x 10,000 characters, 200,590 rendered: at least 15,430 tokens of the tiny tokenizer (13 characters a token at most)
    messages = [{"role": "user", "content": "x" * 10_000} for _ in range(20)]
    return validate(ChatCompletionRequest, {"model": "plain", "messages": messages, **fields})


@pytest.mark.parametrize("fields, param, message", [
    ({}, "messages", "However, your messages resulted in at least 15430 tokens. Please reduce the length of the "
                     "messages."),
    ({"max_tokens": 4}, "messages", "However, you requested at least 15434 tokens (at least 15430 in the messages, "
                                    "4 in the completion)."),
    ({"max_completion_tokens": 9000}, "max_completion_tokens", "at least 15430 in the messages, 9000 in the "
                                                                "completion"),
])
async def test_a_huge_message_list_is_refused_without_calling_the_tokenizer(fields, param, message):
    tokenizer = build_tiny_tokenizer()
    counting = CountingTokenizer(tokenizer)
    local = _backend(counting, tokenizer)
    counting.counts.update(encodes=0, whole_encodes=0)   # the cache's own probe at its start
    with pytest.raises(ApiError) as caught:
        await local.prepare_chat(_huge_chat(**fields), "t", "r1")
    assert counting.counts["encodes"] == counting.counts["whole_encodes"] == 0
    error = caught.value
    assert (error.status, error.type, error.code, error.param) == (400, "invalid_request_error",
                                                                  "context_length_exceeded", param)
    assert error.message.startswith(f"This model's maximum context length is {CONTEXT} tokens.")
    assert message in error.message
    assert error.num_prompt_tokens is None   # a bound, not a count: its refused step records no size


async def test_a_prompt_over_the_context_but_within_the_bound_is_counted_as_before():
    tokenizer = build_tiny_tokenizer()
    counting = CountingTokenizer(tokenizer)
    request = validate(ChatCompletionRequest, {"model": "plain", "messages": [{"role": "user", "content": "x" * 9000}]})
    with pytest.raises(ApiError) as caught:
        await _backend(counting, tokenizer).prepare_chat(request, "t", "r1")
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"
    assert caught.value.num_prompt_tokens > 9000 and "at least" not in caught.value.message
    assert counting.counts["encodes"] == 1


def test_the_refusal_names_the_field_as_the_counted_one_does():
    for num_max_tokens in (None, 4, CONTEXT - 1, CONTEXT, 10**9):
        bound = prompt_past_context(20_000, num_max_tokens, CONTEXT, param="prompt", budget_param="max_tokens")
        counted = context_length_exceeded(20_000, num_max_tokens, CONTEXT, param="prompt", budget_param="max_tokens")
        assert (bound.status, bound.type, bound.code, bound.param) == (counted.status, counted.type, counted.code,
                                                                       counted.param)
        assert bound.message.replace("at least ", "") == counted.message


def _trained_bpe() -> PreTrainedTokenizerFast:
    from tokenizers import trainers
    rng = random.Random(0)
    words = ["def", " return", "    ", "\n\n", " the", "résumé", "日本語", "🙂", "x" * 12, " " * 24]
    corpus = ["".join(rng.choice(words) for _ in range(50)) for _ in range(300)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, additional_special_tokens=["<|im_start|>", "<|im_end|>"])


@pytest.mark.parametrize("which", ["tiny", "bpe"])
def test_the_bound_is_never_more_tokens_than_the_text_is(which):
    tokenizer = build_tiny_tokenizer() if which == "tiny" else _trained_bpe()
    bound = PromptBound.of(tokenizer)
    assert bound.max_chars_per_token is not None
    if which == "tiny":   # bytes are tokens; the longest token is the added "<|endoftext|>"
        assert bound.max_chars_per_token == len("<|endoftext|>")
    special = SpecialText.of(tokenizer)
    cache = PromptTokenCache(tokenizer)
    rng = random.Random(3)
    pieces = ["x" * 12, " " * 24, "\n\n", "<|im_start|>", "<|im_end|>", "résumé", "日本語", "🙂", "a", "\ufdd0"]
    for _ in range(200):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert bound.at_least_tokens(text) <= len(tokenizer.encode(text, add_special_tokens=False))
        marked = "<|im_start|>user\n" + special.mark_string(text) + "<|im_end|>\n"
        assert bound.at_least_tokens(marked, marked=True) <= len(cache.encode("t", marked, marked=True))


def _tokenizer(**parts) -> PreTrainedTokenizerFast:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(parts.pop("model", None) or models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))},
                                                                merges=[]))
    backend.pre_tokenizer = parts.pop("pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=False))
    if "normalizer" in parts:
        backend.normalizer = parts.pop("normalizer")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    for token in parts.pop("added", ()):
        tokenizer.add_tokens([token])
    return tokenizer


@pytest.mark.parametrize("why, tokenizer", [
    ("whitespace is dropped", lambda: _tokenizer(pre_tokenizer=pre_tokenizers.Whitespace())),
    ("NFC may join characters", lambda: _tokenizer(normalizer=normalizers.NFC())),
    ("a Strip drops characters", lambda: _tokenizer(normalizer=normalizers.Strip())),
    ("an unknown word is one token", lambda: _tokenizer(model=models.WordPiece({"[UNK]": 0, "a": 1},
                                                                                unk_token="[UNK]"))),
    ("a token swallows the spaces beside it", lambda: _tokenizer(added=[
        __import__("tokenizers").AddedToken("<mask>", lstrip=True)])),
])
def test_a_tokenizer_whose_tokens_do_not_bound_the_text_gets_no_bound(why, tokenizer):
    bound = PromptBound.of(tokenizer())
    assert bound.max_chars_per_token is None, why
    assert bound.at_least_tokens("x" * 10**6) == 0   # never refuses: the tokenized check decides
    bound.refuse_past_context("x" * 10**6, None, CONTEXT)


def test_the_prompt_cache_tokenizes_each_character_once_and_builds_no_offsets_list():
    tokenizer = build_tiny_tokenizer()
    counting = CountingTokenizer(tokenizer)
    cache = PromptTokenCache(counting, check_every=10**9)
    prompt = "".join(f"<|im_start|>user\nstep {i} " + "x" * 200 + "<|im_end|>\n" for i in range(300))
    assert cache.encode("t", prompt) == tokenizer.encode(prompt, add_special_tokens=False)
    assert counting.counts["chars"] == len(prompt)   # one pass, not one per cut
    steps, tokenized = [prompt], len(prompt)
    for i in range(6):
        steps.append(steps[-1] + f"<|im_start|>assistant\nreply {i}<|im_end|>\n")
        before = counting.counts["chars"]
        assert cache.encode("t", steps[-1]) == tokenizer.encode(steps[-1], add_special_tokens=False)
        # only what follows the last cut: the "\n" after the last <|im_end|>, and the new turn
        assert counting.counts["chars"] - before == len(steps[-1]) - len(steps[-2]) + 1
        tokenized += len(steps[-1]) - len(steps[-2]) + 1
    assert counting.counts["chars"] == tokenized
    assert counting.counts["offsets_lists"] == 0   # only the cut tokens' offsets are asked for


def test_a_byte_without_its_token_is_not_counted_and_a_missing_continuation_byte_means_no_bound():
    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    control = level.pre_tokenize_str("\x04")[0][0]   # what SmolLM2's vocabulary lacks, as 5 others
    without = _tokenizer(model=models.BPE(vocab={c: i for i, c in enumerate(c for c in chars if c != control)},
                                          merges=[]))
    assert without.encode("\x04" * 100, add_special_tokens=False) == []   # the tokenizer drops it
    bound = PromptBound.of(without)
    assert (bound.max_chars_per_token, bound.vanishing) == (1, "\x04")
    assert bound.at_least_tokens("\x04" * 100 + "ab") == 2
    continuation = level.pre_tokenize_str("é")[0][0][1]   # 0xA9, a byte inside a character of several
    assert PromptBound.of(_tokenizer(model=models.BPE(
        vocab={c: i for i, c in enumerate(c for c in chars if c != continuation)}, merges=[]))).max_chars_per_token \
        is None


async def test_a_huge_completions_prompt_is_refused_without_calling_the_tokenizer():
    tokenizer = build_tiny_tokenizer()
    counting = CountingTokenizer(tokenizer)
    local = _backend(counting, tokenizer)
    counting.counts.update(encodes=0, whole_encodes=0)
    request = validate(CompletionRequest, {"model": "plain", "prompt": ["hi", "x" * 200_000], "max_tokens": 4})
    with pytest.raises(ApiError) as caught:
        await local.prepare_completion(request, "t", "r1")
    assert counting.counts["encodes"] == counting.counts["whole_encodes"] == 0
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "prompt")
    assert "at least 15385 in the prompt, 4 in the completion" in caught.value.message
