"""Generated tokens as OpenAI reports them with `logprobs`: each token's text, its exact
UTF-8 bytes, and its log probability with the likeliest alternatives.

A token can end inside a multi-byte character, so its text alone may not be valid
UTF-8: the text then holds U+FFFD (as decoding it alone gives), while `bytes` are exact,
so joining the tokens' bytes gives the reply. Exact bytes are read from the vocabulary
of a byte-level BPE tokenizer (GPT-2's scheme, used by SmolLM2 and most current models)
or from SentencePiece byte tokens (`<0xE2>`); for anything else they are the text's.
"""
from __future__ import annotations

import re
from types import MappingProxyType

from shards.protocol import TokenLogprob

from gateway.backend import TokenChoice


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's stand-in character per byte: printable Latin-1 bytes stand for
    themselves; the other 68 take the code points from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet = {chr(byte): byte for byte in printable}
    others = [byte for byte in range(256) if byte not in alphabet.values()]
    alphabet.update({chr(256 + i): byte for i, byte in enumerate(others)})
    return alphabet


BYTE_OF_CHAR = MappingProxyType(_byte_level_alphabet())
SENTENCEPIECE_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def is_byte_level(tokenizer) -> bool:
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


def token_bytes(tokenizer, token_id: int, byte_level: bool, special_ids: frozenset[int] | None = None) -> bytes:
    """The exact bytes `token_id` stands for (special tokens: their decoded text's).
    `special_ids`: the tokenizer's, when the caller already has them."""
    if special_ids is None:
        special_ids = frozenset(tokenizer.all_special_ids)
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(piece, str) and piece and token_id not in special_ids:
        if byte_level and all(char in BYTE_OF_CHAR for char in piece):
            return bytes(BYTE_OF_CHAR[char] for char in piece)
        match = SENTENCEPIECE_BYTE.fullmatch(piece)
        if match:
            return bytes([int(match.group(1), 16)])
    return tokenizer.decode([token_id]).encode("utf-8")


def special_ids(tokenizer) -> frozenset[int]:
    """The tokens `decode(..., skip_special_tokens=True)` leaves out: the special ones and
    the added tokens marked special."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return frozenset(tokenizer.all_special_ids) | {i for i, token in added.items() if getattr(token, "special", False)}


def token_choices(tokenizer, logprobs: list[TokenLogprob], *, generated: bool = False) -> list[TokenChoice]:
    """The worker's scored token ids as text and bytes, alternatives likeliest first.
    `generated`: tokens of a reply, whose text leaves special tokens out (the worker's
    detokenizer skips them): a special token then keeps its name but has no bytes, so
    the tokens' bytes spell the text (a prompt's, echoed as written, keep theirs)."""
    byte_level, specials = is_byte_level(tokenizer), special_ids(tokenizer)

    def choice(token_id: int, logprob: float) -> tuple[str, bytes, float]:
        if generated and token_id in specials:
            return tokenizer.decode([token_id]), b"", logprob
        return tokenizer.decode([token_id]), token_bytes(tokenizer, token_id, byte_level, specials), logprob
    return [TokenChoice(*choice(scored.token_id, scored.logprob),
                        top=tuple(choice(token_id, logprob) for token_id, logprob in scored.top))
            for scored in logprobs]
