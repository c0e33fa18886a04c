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
    from gateway.legacy_logprobs import completion_logprobs

    pieces = [b"\xc3", b"\xa9", b"!", b"\xe2\x82", b"\xac", b"<|im_end|>"]
    choices = [TokenChoice(piece.decode("utf-8", "replace"), piece, -1.0) for piece in pieces]
    text = b"".join(pieces).decode()
    offsets = completion_logprobs(choices)["text_offset"]
    assert text == "é!€<|im_end|>" and offsets == [0, 0, 1, 2, 2, 3]
    assert completion_logprobs(choices[2:], text_offset=1)["text_offset"] == offsets[2:]
    assert all(0 <= offset < len(text) for offset in offsets)


def test_legacy_logprobs_name_partial_utf8_tokens_by_their_bytes():
    """Known answer: byte pieces of 🍕 and 中 each show alone as U+FFFD; as OpenAI's legacy
    endpoint does, they are named `bytes:\\xNN...`, in `tokens` and as `top_logprobs` keys,
    so no alternative is lost and the greedy token's entry is its own, likeliest value. Of
    two tokens with one name, the likelier's value stays."""
    from gateway.backend import TokenChoice
    from gateway.legacy_logprobs import completion_logprobs

    pizza, pizza_end, han = b"\xf0\x9f", b"\x8d\x95", b"\xe4\xb8"
    shown = "\ufffd"
    choices = [TokenChoice("Hi", b"Hi", None),   # an echoed prompt's first token
               TokenChoice(shown, pizza, -0.5, top=((shown, pizza, -0.5), ("\n", b"\n", -1.0), (shown, han, -2.0),
                                                    (",", b",", -3.0), (shown, pizza_end, -3.5))),
               TokenChoice(shown, pizza_end, -0.25, top=((shown, pizza_end, -0.25), ("x", b"x", -1.5),
                                                         ("x", b"x", -2.5)))]
    logprobs = completion_logprobs(choices)
    assert logprobs["tokens"] == ["Hi", "bytes:\\xf0\\x9f", "bytes:\\x8d\\x95"]
    assert logprobs["token_logprobs"] == [None, -0.5, -0.25]
    assert logprobs["top_logprobs"] == [
        None,
        {"bytes:\\xf0\\x9f": -0.5, "\n": -1.0, "bytes:\\xe4\\xb8": -2.0, ",": -3.0, "bytes:\\x8d\\x95": -3.5},
        {"bytes:\\x8d\\x95": -0.25, "x": -1.5}]
    assert logprobs["text_offset"] == [0, 2, 2]
    assert json.loads(json.dumps(logprobs))["tokens"][1] == "bytes:\\xf0\\x9f"   # a backslash, then x, on the wire


def test_legacy_top_logprobs_hold_each_token_with_its_own_value():
    """Invariant, over random byte-level tokens (most not whole UTF-8): a position's
    `top_logprobs` has one key per distinct token, its likeliest first, and the chosen
    token (`tokens[i]`, with the value `token_logprobs[i]`) last when it is not among them
    (up to logprobs + 1 keys, as OpenAI); and bytes that differ never share a key."""
    from gateway.backend import TokenChoice
    from gateway.legacy_logprobs import completion_logprobs, legacy_token_name

    rng = random.Random(19)
    source = "é€🍕中 ok\n".encode()
    pieces = sorted({source[i:i + n] for i in range(len(source)) for n in (1, 2, 3) if i + n <= len(source)})
    choices = []
    for _ in range(300):
        alternatives = rng.sample(pieces, rng.randrange(1, 6))
        values = sorted((-rng.random() * 8 for _ in alternatives), reverse=True)
        top = tuple((piece.decode("utf-8", "replace"), piece, value) for piece, value in zip(alternatives, values))
        chosen = rng.randrange(len(top) + 1)   # past the end: a token outside the top
        text, token_bytes, logprob = top[chosen] if chosen < len(top) else ("\ufffd", b"\xff", -9.0)
        choices.append(TokenChoice(text, token_bytes, logprob, top=top))
    logprobs = completion_logprobs(choices)
    names = {legacy_token_name(piece.decode("utf-8", "replace"), piece): piece for piece in pieces + [b"\xff"]}
    assert len(names) == len(pieces) + 1
    for choice, token, value, top in zip(choices, logprobs["tokens"], logprobs["token_logprobs"],
                                         logprobs["top_logprobs"]):
        among = any(piece == choice.token_bytes for _, piece, _ in choice.top)
        assert len(top) == len(choice.top) + (not among) and max(top, key=top.get) == next(iter(top))
        assert names[token] == choice.token_bytes and value == choice.logprob and top[token] == value
        assert among or list(top)[-1] == token


def test_a_chat_completion_message_always_has_refusal():
    """OpenAI's response message requires `refusal` (nullable): null when the model did
    not refuse, its text when it did; the message a later turn replays stays without it."""
    from gateway.backend import RefusalDelta, Usage
    from gateway.collected import Reply
    from gateway.openai_format import chat_completion, chat_message

    reply = Reply.of(2)
    reply.add(TextDelta("Sure.", choice=0))
    reply.add(RefusalDelta("I can't.", choice=1))
    completion = chat_completion(ResponseHeader("chatcmpl-1", "m", 1700000000), reply, Usage(3, 2))
    assert [choice["message"] for choice in completion["choices"]] == [
        {"role": "assistant", "content": "Sure.", "refusal": None, "annotations": []},
        {"role": "assistant", "content": "", "refusal": "I can't.", "annotations": []}]
    assert chat_message(reply.choices[0]) == {"role": "assistant", "content": "Sure."}
