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


class _PieceTokenizer:
    """Token i decodes to `pieces[i]`: a tokenizer whose token boundaries a test chooses."""

    def __init__(self, pieces) -> None:
        self.pieces = list(pieces)

    def decode(self, ids, **options) -> str:
        return "".join(self.pieces[i] for i in ids)


def _feed_pieces(pieces, stop):
    """The deltas of a reply of one token per piece, then what the detokenizer kept."""
    detok = Detokenizer(_PieceTokenizer(pieces), tuple(stop))
    deltas = []
    for token in range(len(pieces)):
        deltas.append(detok.push(token))
        if detok.stopped:
            break
    deltas.append(detok.flush())
    return "".join(deltas), detok


def _first_stop_reference(text, stops):
    """What the reply is, read one character at a time: the text before the first stop
    string to complete (the longest of those completing at the same character)."""
    for end in range(1, len(text) + 1):
        ending = [len(stop) for stop in stops if stop and text[:end].endswith(stop)]
        if ending:
            return text[:end - max(ending)], True
    return text, False


@pytest.mark.parametrize("stop,expected", [
    (("r", "w"), "The "),            # one token completes both: the cut is at the earlier "w"
    (("w", "r"), "The "),
    (("ther", "eat"), "The w"),
    (("eat", "ther"), "The w"),
    (("her", "weather", "x"), "The "),
])
def test_one_token_completing_several_stops_cuts_at_the_first_in_the_text(stop, expected):
    """QA65 D1: SmolLM2 with stop ["r", "w"] answered "The weathe" (holding the stop "w"):
    the stop listed first won, not the one that comes first in the text."""
    for pieces in (["The", " weather", " is"], ["The weather is"], list("The weather is")):
        sent, detok = _feed_pieces(pieces, stop)
        assert sent == detok.text == expected and detok.stopped, pieces


@pytest.mark.parametrize("text,stop,expected", [
    ("xabcdef", ("cde", "abcd"), "x"),      # overlapping: "abcd" completes first
    ("xabcd", ("abcd", "bc"), "xa"),        # "bc" completes before "abcd" does
    ("abcd", ("cd", "bcd"), "a"),           # both complete at "d": the longer begins first
    ("abcdef", ("abcdef", "cd"), "ab"),     # "cd" completes inside "abcdef", before it ends
    ("aaab", ("aab", "ab"), "a"),           # a self-overlapping stop, matched from its second "a"
    ("abababc", ("ababc",), "ab"),
])
def test_overlapping_stops_cut_where_one_first_completes_however_the_text_is_split(text, stop, expected):
    for pieces in ([text], list(text), [text[:2], text[2:]], [text[:3], text[3:4], text[4:]]):
        pieces = [p for p in pieces if p]
        sent, detok = _feed_pieces(pieces, stop)
        assert sent == detok.text == expected and detok.stopped, pieces


def test_a_stop_spanning_tokens_is_held_back_then_cut():
    pieces = ["x <", "/en", "d> tail", " more"]
    detok = Detokenizer(_PieceTokenizer(pieces), ("tail", "</end>"))
    assert [detok.push(token) for token in range(3)] == ["x ", "", ""]
    assert detok.stopped and detok.text == "x " and detok.flush() == ""


@pytest.mark.parametrize("text,stop,expected", [
    ("héllo wörld ✓ done", ("✓", "wö"), "héllo "),
    ("ok 👍🏽 fine 日本語、", ("、", "🏽", "本"), "ok 👍"),
    ("é\u0301e\u0301 x", ("\u0301 ", "e\u0301"), "é\u0301"),
])
def test_multi_byte_stops_cut_at_the_first_in_the_text(tokenizer, text, stop, expected):
    """The tiny tokenizer is byte-level: a multi-byte character comes over several tokens;
    as one token, the text completes every stop at once."""
    detok, deltas = _feed(tokenizer, text, stop)
    assert "".join(deltas) == detok.text == expected and detok.stopped
    sent, detok = _feed_pieces([text], stop)
    assert sent == detok.text == expected and detok.stopped


def test_stop_strings_cut_the_text_as_read_one_character_at_a_time():
    """Known answers from a brute-force reading, for random texts, stops (overlapping,
    self-overlapping, in any order) and token boundaries: the reply never holds a stop."""
    import random

    rng = random.Random(65)
    for _ in range(400):
        text = "".join(rng.choice("aab c") for _ in range(rng.randint(0, 24)))
        stops = tuple("".join(rng.choice("aab c") for _ in range(rng.randint(1, 5)))
                      for _ in range(rng.randint(1, 4)))
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, max(0, len(text) - 1)))) if text else []
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)]) if text[i:j]]
        expected, stopped = _first_stop_reference(text, stops)
        sent, detok = _feed_pieces(pieces, stops)
        assert (sent, detok.text, detok.stopped) == (expected, expected, stopped), (text, stops, pieces)
        assert not any(stop in sent for stop in stops)


def test_long_stop_strings_cost_a_token_its_own_text_not_the_stops_length():
    """QA65 D3: each token re-searched its held-back text for every stop length, so four
    8,000-character stops cost ~12 s over 6,000 tokens on a quiet machine (0.06 s without
    stops), in a worker's decode loop. Knuth–Morris–Pratt: ~0.03 s. The bound is generous."""
    import time

    pieces = [chr(97 + i % 20) for i in range(6000)]
    detok = Detokenizer(_PieceTokenizer(pieces), ("x" * 8000, "ab" * 4000, "abc" * 2666, "y" * 8000))
    started = time.perf_counter()
    for token in range(len(pieces)):
        detok.push(token)
        if token % 500 == 0:
            assert time.perf_counter() - started < 5.0, f"{token} tokens took over 5 s"
    assert time.perf_counter() - started < 5.0
    assert not detok.stopped and detok.text == "".join(pieces)
