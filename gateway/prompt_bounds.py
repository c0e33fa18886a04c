"""The fewest tokens a prompt can be, from its length alone: a prompt certainly past the
model's context is refused before it is tokenized (QA134 H0).

Tokenizing costs ~2-6 µs and ~300 bytes of gateway memory a token, so a few megabytes of
text (a conversation grows past the body limit by appends) took tens of seconds and
gigabytes before the context check refused it. A text of C characters is at least
ceil(C / `max_chars_per_token`) tokens when every token stands for at most that many of
its characters and no character is dropped on the way; the longest vocabulary entry or
added token bounds the first (a byte-level entry spells bytes, never fewer than the
characters they encode; a byte-fallback `<0x41>` is longer than its one byte), and the
second holds for a BPE whose every character yields a token (byte-level, byte fallback,
or an unknown token per character) behind normalizers and pre-tokenizers that never shrink
the text. Any other tokenizer has no bound (`max_chars_per_token` None): its prompts are
tokenized and checked as before.

A marked prompt (shards/special_text.py) stands for a text no shorter than itself less its
MARKs: a MARK pair stands for at least one character.

Invariants: `at_least_tokens(text) <= len(tokenizer.encode(text))` (and for a marked text,
`<= len(MarkedTextEncoder.encode(text))`); the bound is computed once per tokenizer; the
refusal is the tokenized check's 400 (`context_length_exceeded`, the same `param` rule),
saying "at least", with no counted size (`num_prompt_tokens` None).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.errors import ApiError
from shards.special_text import MARK

# normalizers and pre-tokenizers that keep every character of the text (Split unless "Removed")
KEEPING_NORMALIZERS = frozenset({"Prepend"})
KEEPING_PRE_TOKENIZERS = frozenset({"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts"})


@dataclass(frozen=True, slots=True)
class PromptBound:
    """`max_chars_per_token`: the most characters one token of the tokenizer stands for,
    or None when its tokens do not bound a text's length (see the module docstring);
    `vanishing`: the characters that may yield no token (a byte-level vocabulary without
    that byte: SmolLM2 has no token for 6 ASCII control characters), not counted."""
    max_chars_per_token: int | None
    vanishing: str = ""

    @classmethod
    def of(cls, tokenizer) -> PromptBound:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return cls(None)
        try:
            spec = json.loads(backend.to_str())
        except Exception:   # NOTE: a tokenizer that cannot say what it is gets no bound
            return cls(None)
        vanishing = _vanishing_characters(spec)
        if vanishing is None:
            return cls(None)
        longest = max((len(text) for text in backend.get_vocab(with_added_tokens=True)), default=0)
        return cls(longest or None, vanishing)

    def at_least_tokens(self, text: str, *, marked: bool = False) -> int:
        """The fewest tokens `text` (marked text when `marked`) can be; 0 with no bound."""
        if self.max_chars_per_token is None:
            return 0
        num_chars = len(text) - (text.count(MARK) if marked else 0) - sum(map(text.count, self.vanishing))
        return max(0, -(-num_chars // self.max_chars_per_token))

    def refuse_past_context(self, text: str, num_max_tokens: int | None, max_context_tokens: int, *,
                            marked: bool = False, param: str = "messages", budget_param: str = "max_tokens") -> None:
        """Raise the 400 `context_length_exceeded` when `text` is certainly more tokens
        than the context holds (so the tokenized check would refuse it too)."""
        at_least = self.at_least_tokens(text, marked=marked)
        if at_least > max_context_tokens:
            raise prompt_past_context(at_least, num_max_tokens, max_context_tokens, param=param,
                                      budget_param=budget_param)


def prompt_past_context(at_least: int, num_max_tokens: int | None, max_context_tokens: int, *,
                        param: str, budget_param: str) -> ApiError:
    """`errors.context_length_exceeded` for a prompt known to be at least `at_least`
    tokens (not counted): its message says "at least", its `param` follows the same rule."""
    intro = f"This model's maximum context length is {max_context_tokens} tokens. However, "
    if num_max_tokens is None:
        return ApiError(400, f"{intro}your {param} resulted in at least {at_least} tokens. Please reduce the "
                        f"length of the {param}.", "invalid_request_error", "context_length_exceeded", param)
    return ApiError(
        400, f"{intro}you requested at least {at_least + num_max_tokens} tokens (at least {at_least} in the "
        f"{param}, {num_max_tokens} in the completion). Please reduce the length of the {param} or completion.",
        "invalid_request_error", "context_length_exceeded",
        budget_param if num_max_tokens >= max_context_tokens else param)


def _vanishing_characters(spec: dict) -> str | None:
    """The characters that may yield no token in the tokenizer described by `spec` (its
    tokenizer.json), when every other character yields tokens that each stand for no more
    than their vocabulary entry spells; None when that does not hold."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or spec.get("truncation") is not None:
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if any(token.get("lstrip") or token.get("rstrip") for token in spec.get("added_tokens") or ()):
        return None   # such a token swallows the whitespace beside it
    if not (_keeps(spec.get("normalizer"), "normalizers", _keeping_normalizer)
            and _keeps(spec.get("pre_tokenizer"), "pretokenizers", _keeping_pre_tokenizer)):
        return None
    vocab = model.get("vocab") or {}
    if _has_byte_level(spec.get("pre_tokenizer")):   # a byte without its token is dropped
        missing = {byte for byte, char in enumerate(_byte_level_chars()) if char not in vocab}
        if any(0x80 <= byte < 0xC0 for byte in missing):   # a character of several bytes could vanish
            return None
        return "".join(chr(byte) for byte in sorted(missing) if byte < 0x80)
    if model.get("byte_fallback") and all(f"<0x{byte:02X}>" in vocab for byte in range(256)):
        return ""
    return "" if model.get("unk_token") in vocab and not model.get("fuse_unk") else None


def _byte_level_chars() -> list[str]:
    """The character a byte-level (GPT-2) pre-tokenizer writes for each byte, in byte order:
    printable Latin-1 bytes stand for themselves, the others for 256 and up, in order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = iter(range(256, 512))
    return [chr(byte) if byte in kept else chr(next(shifted)) for byte in range(256)]


def _keeps(step: dict | None, inner: str, keeping) -> bool:
    if step is None:
        return True
    if step.get("type") == "Sequence":
        return all(_keeps(each, inner, keeping) for each in step.get(inner) or ())
    return keeping(step)


def _keeping_normalizer(step: dict) -> bool:
    if step.get("type") == "Replace":   # a plain string replaced by one no shorter
        pattern = (step.get("pattern") or {}).get("String")
        return pattern is not None and len(step.get("content") or "") >= len(pattern)
    return step.get("type") in KEEPING_NORMALIZERS


def _keeping_pre_tokenizer(step: dict) -> bool:
    if step.get("type") == "Split":
        return step.get("behavior") != "Removed"
    return step.get("type") in KEEPING_PRE_TOKENIZERS


def _has_byte_level(step: dict | None) -> bool:
    if step is None:
        return False
    if step.get("type") == "Sequence":
        return any(_has_byte_level(each) for each in step.get("pretokenizers") or ())
    return step.get("type") == "ByteLevel"
