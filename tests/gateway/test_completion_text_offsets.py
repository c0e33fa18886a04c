"""Legacy completions `logprobs.text_offset`: each token's offset is where its first
byte's character is in the reply's text; offsets never decrease, never pass the text's
end (a stop string's tokens, a token with no bytes: a special token the text leaves out),
and a stream's equal the whole reply's however its text and tokens come in chunks."""
from __future__ import annotations

import json
import random

from gateway.backend import Finished, TextDelta, TokenChoice, Usage
from gateway.collected import Collected, Reply
from gateway.openai_format import ChunkWriter, ResponseHeader, text_completion


def _choice(piece: bytes) -> TokenChoice:
    name = piece.decode("utf-8", "replace")
    return TokenChoice(name, piece, -1.0, top=((name, piece, -1.0),))


def _whole(text: str, tokens: list[TokenChoice]) -> dict:
    collected = Collected()
    collected.add(TextDelta(text, tokens))
    collected.add(Finished("stop", Usage(1, len(tokens)), worker="w0"))
    reply = Reply([collected])
    return text_completion(ResponseHeader("cmpl-1", "tiny"), reply, Usage(1, len(tokens)))["choices"][0]


def _streamed(chunks: list[tuple[str, list[TokenChoice] | None]]) -> tuple[str, list[str], list[int]]:
    """The text, tokens and offsets a stream of `chunks` sends, in order."""
    writer = ChunkWriter(ResponseHeader("cmpl-1", "tiny"), is_chat=False, include_usage=False)
    lines = [writer.event(TextDelta(text, tokens)) for text, tokens in chunks]
    lines.append(writer.event(Finished("stop", Usage(1, 1), worker="w0")))
    text, names, offsets = "", [], []
    for line in b"".join(lines).split(b"\n\n"):
        if not line:
            continue
        choice = json.loads(line[len(b"data: "):])["choices"][0]
        text += choice["text"]
        if choice["logprobs"] is not None:
            names += choice["logprobs"]["tokens"]
            offsets += choice["logprobs"]["text_offset"]
    return text, names, offsets


def test_a_special_token_the_text_leaves_out_does_not_move_the_offsets():
    """Known answer (QA54's SmolLM2 reply, `<|im_start|>` with no bytes: the text leaves
    it out), whole and streamed as the worker sent it: 'ass' is at 1, 'To' at 11."""
    pieces = [b"\n", b"", b"ass", b"istant", b"\n", b"To", b" create", b" a"]
    tokens = [_choice(p) for p in pieces]
    text = "\nassistant\nTo create a"
    whole = _whole(text, tokens)["logprobs"]
    assert whole["text_offset"] == [0, 1, 1, 4, 10, 11, 13, 20]
    chunks = [("\n", tokens[:1]), ("", tokens[1:2]), ("ass", tokens[2:3]), ("istant\nTo", tokens[3:6]),
              (" create a", tokens[6:])]
    assert _streamed(chunks) == (text, whole["tokens"], whole["text_offset"])


def test_a_stop_strings_tokens_sit_at_the_texts_end_streamed_too():
    """Known answer: stop "aab" cut "xaaab" to "xa"; its tokens came before the worker knew
    (the text held back, then sent up to the cut). Whole and stream: no offset past 2."""
    tokens = [_choice(p) for p in (b"x", b"a", b"a", b"a", b"b")]
    whole = _whole("xa", tokens)["logprobs"]
    assert whole["text_offset"] == [0, 1, 2, 2, 2]
    chunks = [("x", tokens[:2]), ("", tokens[2:3]), ("a", tokens[3:4]), ("", tokens[4:])]
    assert _streamed(chunks) == ("xa", whole["tokens"], [0, 1, 2, 2, 2])


def test_a_text_held_back_then_sent_keeps_each_tokens_offset():
    """Known answer: stop "bc" held "b" of token "ab" back, sent it with "x": x is at 2."""
    tokens = [_choice(b"ab"), _choice(b"x")]
    assert _whole("abx", tokens)["logprobs"]["text_offset"] == [0, 2]
    assert _streamed([("a", tokens[:1]), ("bx", tokens[1:])])[2] == [0, 2]


def test_a_token_after_an_unfinished_character_begins_after_its_u_fffd():
    """Known answer: a lead byte then ')': the text is '\\ufffd)', ')' is at 1."""
    tokens = [_choice(p) for p in (b"x", b"\xe2", b")", b"\xc3", b"\xa9")]
    assert _whole("x\ufffd)é", tokens)["logprobs"]["text_offset"] == [0, 1, 2, 3, 3]


def _reference_offsets(pieces: list[bytes], text_length: int) -> list[int]:
    """Each token's first byte's character: the last one of the bytes up to it decoded."""
    offsets, before = [], b""
    for piece in pieces:
        through = before + piece[:1]
        offsets.append(len(through.decode("utf-8", "replace")) - (1 if piece else 0))
        before += piece
    return [min(offset, text_length) for offset in offsets]


def test_stream_and_whole_offsets_agree_and_stay_inside_the_text():
    """Invariant over random byte-level tokens (some with no bytes), texts cut short (a stop
    string) and random chunkings (text held back, then sent with later tokens): the
    stream sends the whole reply's tokens and offsets, which never decrease, never pass
    the text's end, and are each token's first byte's character."""
    rng = random.Random(54)
    source = "é€🍕中 ok\n<|x|>".encode()
    for _ in range(300):
        pieces = [b"" if rng.random() < 0.1 else source[(i := rng.randrange(len(source))):i + rng.randrange(1, 4)]
                  for _ in range(rng.randrange(1, 12))]
        full = b"".join(pieces).decode("utf-8", "replace")
        text = full[:rng.randrange(len(full) + 1)] if rng.random() < 0.4 else full
        tokens = [_choice(p) for p in pieces]
        whole = _whole(text, tokens)["logprobs"]
        offsets = whole["text_offset"]
        assert offsets == sorted(offsets) and all(0 <= offset <= len(text) for offset in offsets)
        assert [o for o, p in zip(offsets, pieces) if p] == [
            o for o, p in zip(_reference_offsets(pieces, len(text)), pieces) if p]
        cuts = sorted(rng.randrange(len(text) + 1) for _ in range(rng.randrange(0, 4)))
        texts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        splits = sorted(rng.randrange(len(tokens) + 1) for _ in range(len(texts) - 1))
        groups = [tokens[a:b] for a, b in zip([0, *splits], [*splits, len(tokens)])]
        assert _streamed(list(zip(texts, groups))) == (text, whole["tokens"], offsets)


def _offsets_of(gateway, body: dict) -> tuple[dict, tuple[str, list[str], list[int]]]:
    """The whole reply's choice, and the text, tokens and offsets the stream sends."""
    import httpx

    url = f"{gateway.base_url}/v1/completions"
    whole = httpx.post(url, json=body, headers=gateway.headers(), timeout=120).json()["choices"][0]
    text, names, offsets = "", [], []
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=gateway.headers(), timeout=120) as lines:
        for line in lines.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[len("data: "):])["choices"]:
                    text += choice["text"]
                    if choice["logprobs"] is not None:
                        names += choice["logprobs"]["tokens"]
                        offsets += choice["logprobs"]["text_offset"]
    return whole, (text, names, offsets)


def test_generated_special_tokens_keep_offsets_inside_the_text_whole_and_streamed(gateway):
    """The tiny model, sampled with a seed and `<|im_start|>` (id 256, no stop token)
    favoured by `logit_bias`: the reply mixes special tokens, which its text leaves out,
    with bytes. Whole and streamed: the same text, tokens and offsets, which never
    decrease and never pass the text's end."""
    body = {"model": "tiny", "prompt": "def f(x):", "max_tokens": 24, "temperature": 1.0, "seed": 3,
            "logprobs": 0, "logit_bias": {"256": 4}}
    whole, streamed = _offsets_of(gateway, body)
    tokens, offsets = whole["logprobs"]["tokens"], whole["logprobs"]["text_offset"]
    assert "<|im_start|>" in tokens and len(tokens) == 24   # the bias made some, not all
    assert any(token != "<|im_start|>" for token in tokens)
    assert offsets == sorted(offsets) and all(0 <= offset <= len(whole["text"]) for offset in offsets)
    assert streamed == (whole["text"], tokens, offsets)


def test_generated_special_tokens_have_no_bytes_and_do_not_move_the_offsets(gateway):
    """With gateway/token_text.py's `generated` (the proposed diff): a generated special
    token keeps its name but has no bytes, so the offsets are exactly each token's first
    byte's character in the text, and chat's bytes spell the content."""
    import httpx

    body = {"model": "tiny", "prompt": "def f(x):", "max_tokens": 24, "temperature": 1.0, "seed": 3,
            "logprobs": 0, "logit_bias": {"256": 4}}
    whole, _ = _offsets_of(gateway, body)
    tokens, offsets = whole["logprobs"]["tokens"], whole["logprobs"]["text_offset"]
    pieces = [b"" if name == "<|im_start|>" else bytes.fromhex(name[6:].replace("\\x", "")) if name.startswith("bytes:")
              else name.encode() for name in tokens]
    assert whole["text"] == b"".join(pieces).decode("utf-8", "replace")
    assert [o for o, p in zip(offsets, pieces) if p] == [
        o for o, p in zip(_reference_offsets(pieces, len(whole["text"])), pieces) if p]
    chat = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=gateway.headers(), timeout=120, json={
        "model": "tiny", "messages": [{"role": "user", "content": "def f(x):"}], "max_tokens": 24,
        "temperature": 1.0, "seed": 3, "logprobs": True, "logit_bias": {"256": 4}}).json()["choices"][0]
    content = chat["logprobs"]["content"]
    assert any(entry["token"] == "<|im_start|>" and entry["bytes"] == [] for entry in content)
    assert bytes(b for entry in content for b in entry["bytes"]).decode("utf-8", "replace") == chat["message"]["content"]
