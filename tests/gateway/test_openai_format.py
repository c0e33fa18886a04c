"""OpenAI's wire format for streamed chunks (gateway/openai_format.py)."""
from __future__ import annotations

import json
import random

import pytest

from gateway.backend import TextDelta
from gateway.openai_format import ChunkWriter, ResponseHeader

TEXTS = ["", "Hello", ' "quoted" \\ back', "line\nbreak\ttab", "\x00\x1f control", "héllo wörld ✓ 🚀",
         "\u2028\u2029 separators", "</s> <|im_end|>", "\ud7ff\ue000"]


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_chat_text_chunk_is_the_whole_chunk_encoded_byte_for_byte(include_usage):
    """The text chunk's shortcut (its frame encoded once) against the chunk built and
    encoded whole, for texts JSON must escape, and for each choice of a stream."""
    rng = random.Random(5)
    texts = TEXTS + ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)]))
                             for _ in range(rng.randrange(1, 12))) for _ in range(200)]
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", 'model "x"/y', 1700000000), is_chat=True,
                         include_usage=include_usage, num_choices=3)
    for i, text in enumerate(texts):
        index = i % 3
        chunk = writer.event(TextDelta(text, choice=index))
        assert chunk == writer._chunk(writer._choice(index, {"content": text}))
        body = json.loads(chunk.removeprefix(b"data: ").removesuffix(b"\n\n"))
        assert body["choices"] == [{"index": index, "delta": {"content": text}, "logprobs": None,
                                    "finish_reason": None}]
        assert ("usage" in body) is include_usage and body["model"] == 'model "x"/y'


def test_streamed_text_with_unicode_line_breaks_stays_one_sse_line():
    """A model's U+2028 / U+2029 / NEL inside a delta: JSON keeps them raw, but Python's
    splitlines (httpx's iter_lines) breaks lines there; the chunk escapes them."""
    from gateway.openai_format import dumps

    text = "a\u2028b\u2029c\x85d\x0be\x1cé"
    for is_chat in (True, False):
        writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=is_chat, include_usage=False)
        line = writer.event(TextDelta(text)).decode()
        assert line.endswith("\n\n") and len(line.strip().splitlines()) == 1
        choice = json.loads(line.strip().removeprefix("data: "))["choices"][0]
        assert (choice["delta"]["content"] if is_chat else choice["text"]) == text
    assert json.loads(dumps({"t": text})) == {"t": text} and dumps({"t": "plain"}) == b'{"t":"plain"}'


def test_a_tokens_text_offset_is_the_character_its_bytes_begin_in():
    """"é!" then half of "€" as byte-level tokens: each byte of a split character shows as
    U+FFFD alone, yet the offsets count the text's characters."""
    from gateway.backend import TokenChoice
    from gateway.openai_format import completion_logprobs

    pieces = [b"\xc3", b"\xa9", b"!", b"\xe2\x82", b"\xac", b"<|im_end|>"]
    choices = [TokenChoice(piece.decode("utf-8", "replace"), piece, -1.0) for piece in pieces]
    text = b"".join(pieces).decode()
    offsets = completion_logprobs(choices)["text_offset"]
    assert text == "é!€<|im_end|>" and offsets == [0, 0, 1, 2, 2, 3]
    assert completion_logprobs(choices[2:], text_offset=1)["text_offset"] == offsets[2:]
    assert all(0 <= offset < len(text) for offset in offsets)
