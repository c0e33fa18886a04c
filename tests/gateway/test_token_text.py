"""Token text and exact bytes for logprobs, on the real byte-level tokenizer of the tiny model."""
from shards.model_files import load_tokenizer
from shards.protocol import TokenLogprob

from gateway.token_text import BYTE_OF_CHAR, is_byte_level, token_bytes, token_choices


def test_byte_level_alphabet_is_a_bijection_onto_the_256_bytes():
    assert sorted(BYTE_OF_CHAR.values()) == list(range(256))
    assert BYTE_OF_CHAR["A"] == 65 and BYTE_OF_CHAR["Ġ"] == 32 and BYTE_OF_CHAR["Ċ"] == 10  # GPT-2's space, newline


def test_token_bytes_are_exact_where_the_text_alone_is_not():
    tokenizer = load_tokenizer("tiny")  # one token per byte
    assert is_byte_level(tokenizer)
    ids = tokenizer.encode("é€ ok", add_special_tokens=False)
    pieces = [token_bytes(tokenizer, token_id, True) for token_id in ids]
    assert b"".join(pieces) == "é€ ok".encode()
    assert tokenizer.decode([ids[0]]) == "\ufffd" and pieces[0] == b"\xc3"


class SentencePieceLike:
    """Just what token_bytes reads, shaped like a SentencePiece vocabulary."""

    all_special_ids = [0]
    pieces = {0: "</s>", 1: "<0xE2>", 2: "\u2581ok"}

    def convert_ids_to_tokens(self, token_id):
        return self.pieces[token_id]

    def decode(self, ids):
        return {0: "", 1: "\ufffd", 2: " ok"}[ids[0]]


def test_token_bytes_of_sentencepiece_byte_tokens_and_plain_pieces():
    tokenizer = SentencePieceLike()
    assert not is_byte_level(tokenizer)
    assert [token_bytes(tokenizer, i, False) for i in (0, 1, 2)] == [b"", b"\xe2", b" ok"]


def test_token_choices_carry_text_bytes_and_alternatives():
    tokenizer = load_tokenizer("tiny")
    ids = tokenizer.encode("hi", add_special_tokens=False)
    [choice] = token_choices(tokenizer, [TokenLogprob(ids[0], -0.5, ((ids[0], -0.5), (ids[-1], -1.5)))])
    assert (choice.token, choice.logprob) == (tokenizer.decode([ids[0]]), -0.5)
    assert choice.token_bytes == tokenizer.decode([ids[0]]).encode()
    assert [alternative[2] for alternative in choice.top] == [-0.5, -1.5]
