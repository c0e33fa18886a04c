"""Vocabulary: base symbols, the OOV bucket, END handling."""
from __future__ import annotations

from agents_trace.predict.vocabulary import (BASE_SYMBOLS, OOV_SYMBOL, Vocabulary,
                                             with_end)


def test_vocabulary_contains_base_symbols_and_oov_last() -> None:
    vocab = Vocabulary.from_sequences([["USER", "ls", "cd"]])
    for symbol in BASE_SYMBOLS + ("ls", "cd"):
        assert vocab.contains(symbol)
    assert vocab.symbols[-1] == OOV_SYMBOL
    assert vocab.oov_id == vocab.size - 1
    assert [vocab.symbols[i] for i in range(vocab.size)] == list(vocab.symbols)


def test_vocabulary_unseen_symbol_maps_to_oov() -> None:
    vocab = Vocabulary.from_sequences([["USER", "ls"]])
    assert vocab.encode_one("never_seen_tool") == vocab.oov_id
    assert vocab.encode(["ls", "rm", "USER"]) == [vocab.index["ls"], vocab.oov_id,
                                                  vocab.index["USER"]]
    assert not vocab.contains("rm")


def test_vocabulary_oov_literal_is_not_a_known_symbol() -> None:
    vocab = Vocabulary.from_sequences([[OOV_SYMBOL, "ls"]])
    assert vocab.symbols.count(OOV_SYMBOL) == 1
    assert not vocab.contains(OOV_SYMBOL)


def test_with_end_appends_once() -> None:
    assert with_end(["USER"]) == ["USER", "END"]
    assert with_end(["USER", "END"]) == ["USER", "END"]
    assert with_end([]) == ["END"]
