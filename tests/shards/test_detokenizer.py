from __future__ import annotations

import pytest

from shards.detokenizer import Detokenizer
from shards.tiny_model import build_tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def _feed(tokenizer, text, stop=()):
    detok = Detokenizer(tokenizer, tuple(stop))
    deltas = []
    for token in tokenizer.encode(text, add_special_tokens=False):
        deltas.append(detok.push(token))
        if detok.stopped:
            break
    deltas.append(detok.flush())
    return detok, deltas


def test_detokenizer_deltas_concatenate_to_text(tokenizer):
    detok, deltas = _feed(tokenizer, "héllo wörld ✓")
    assert "".join(deltas) == "héllo wörld ✓"
    assert all("\ufffd" not in d for d in deltas)  # multi-byte characters never split


def test_detokenizer_stop_string_cuts_text_and_stops(tokenizer):
    detok, deltas = _feed(tokenizer, "abc STOP def", stop=["STOP"])
    assert detok.stopped
    assert "".join(deltas) == "abc "


def test_detokenizer_holds_back_possible_stop_prefix(tokenizer):
    def push(detok, text):
        return "".join(detok.push(t) for t in tokenizer.encode(text, add_special_tokens=False))

    detok = Detokenizer(tokenizer, ("</end>",))
    assert push(detok, "x </en") == "x "  # "</en" could still become the stop string
    assert push(detok, "d>!") == ""
    assert detok.stopped and detok.text == "x "

    detok = Detokenizer(tokenizer, ("</end>",))
    assert push(detok, "x </e") == "x "
    assert push(detok, "x") == "</ex"  # can no longer be a stop string: released
    assert detok.flush() == "" and not detok.stopped


def test_detokenizer_flush_ends_a_cut_character_as_replacement(tokenizer):
    """A reply cut inside a multi-byte character: the text still spells every byte, the
    incomplete character as U+FFFD, as decoding the whole output gives."""
    ids = tokenizer.encode("ab✓", add_special_tokens=False)
    whole = tokenizer.decode(ids[:-1], skip_special_tokens=True)
    assert whole.endswith("\ufffd")  # the tiny tokenizer is byte-level: ✓ is three tokens
    detok = Detokenizer(tokenizer, ("zz",))
    deltas = [detok.push(token) for token in ids[:-1]]
    assert "".join(deltas) == "ab"
    assert detok.flush() == whole[2:] and detok.text == whole and not detok.stopped


@pytest.mark.parametrize("text,stop,cut_after", [
    ("say </en then </end> more", ("</end>",), 7),   # cut while "</en" is held back
    ("héllo wörld ✓ done", ("zz",), 14),              # cut inside ✓'s three bytes
    ("plain words only", ("zz",), 5),
])
def test_a_resumed_detokenizer_goes_on_as_if_never_cut(tokenizer, text, stop, cut_after):
    """What a worker sent before it died, then what the next worker sends after resuming
    from the same tokens, is exactly what one uninterrupted worker sends."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    whole = Detokenizer(tokenizer, stop)
    expected = "".join(whole.push(t) for t in ids) + ("" if whole.stopped else whole.flush())
    first = Detokenizer(tokenizer, stop)
    sent = "".join(first.push(t) for t in ids[:cut_after])
    resumed = Detokenizer(tokenizer, stop)
    resumed.resume(ids[:cut_after], len(sent))
    rest = ""
    for token in ids[cut_after:]:
        rest += resumed.push(token)
        if resumed.stopped:
            break
    if not resumed.stopped:
        rest += resumed.flush()
    assert sent + rest == expected and resumed.stopped == whole.stopped
