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


class _CountingTokenizer:
    """The tiny tokenizer, recording how many ids each decode was given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.decoded_lengths: list[int] = []

    def decode(self, ids, **options) -> str:
        self.decoded_lengths.append(len(ids))
        return self.tokenizer.decode(ids, **options)


def test_detokenizer_decodes_a_window_not_the_whole_output(tokenizer):
    """Known answer over a long output (multi-byte characters included): the deltas make
    the whole output's decode, and no decode is given more than a few tokens, so a
    token costs the same at the end of a long reply as at its start."""
    text = "".join(f"step {i}: héllo wörld ✓ — ok\n" for i in range(120))
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > 3000
    counting = _CountingTokenizer(tokenizer)
    detok = Detokenizer(counting, ("zz",))
    deltas = [detok.push(token) for token in ids] + [detok.flush()]
    assert "".join(deltas) == tokenizer.decode(ids, skip_special_tokens=True) == text
    assert max(counting.decoded_lengths) <= 4   # ✓ is three byte tokens: the longest wait
    assert len(counting.decoded_lengths) <= 2 * len(ids) + 2


def test_detokenizer_keeps_the_spaces_a_tokenizer_strips_at_a_decodes_start():
    """A SentencePiece-style decoder drops the leading space of the first token it
    decodes ("▁world" alone is "world"): a window starting a token back keeps it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "</s>", "▁Hello", "▁world", "▁foo", "▁", "!"]
    spm = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    spm.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    spm.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    fast = PreTrainedTokenizerFast(tokenizer_object=spm, unk_token="<unk>", eos_token="</s>")
    ids = [2, 3, 1, 4, 6]   # "▁Hello", "▁world", "</s>" (skipped), "▁foo", "!"
    assert fast.decode(ids[1:2]) == "world"
    detok = Detokenizer(fast, ())
    deltas = [detok.push(token) for token in ids] + [detok.flush()]
    assert deltas == ["Hello", " world", "", " foo", "!", ""]
    assert "".join(deltas) == fast.decode(ids, skip_special_tokens=True) == "Hello world foo!"
