"""A stop string that only the final text completes (the output ends inside a multi-byte
character, whose U+FFFD appears only at the end) still ends the reply "stop", as the text
it cut says, on the worker that generated it and on one resuming it."""
from __future__ import annotations

import dataclasses

from shards.protocol import FinishEvent, SamplingParams, TokenEvent
from gateway.token_text import BYTE_OF_CHAR

from tests.shards.test_worker import _item, _loop, _run


def _lead_byte_id(tokenizer) -> int:
    """The tiny tokenizer's token for the byte 0xE2 (a three-byte character's first)."""
    char = next(char for char, byte in BYTE_OF_CHAR.items() if byte == 0xE2)
    return tokenizer.convert_tokens_to_ids(char)


def _forced_lead_byte(tiny_loaded, max_tokens: int, stop: tuple[str, ...]) -> tuple[str, str]:
    """The reply's text and finish reason when every token is forced to the lead byte."""
    loop, out = _loop(tiny_loaded)
    lead = _lead_byte_id(tiny_loaded.tokenizer)
    item = dataclasses.replace(_item("r1"), sampling=SamplingParams(
        max_tokens=max_tokens, temperature=0.0, stop=stop, logit_bias=((lead, 100.0),)))
    loop.handle(item)
    _run(loop)
    tokens = [e for e in out if isinstance(e, TokenEvent)]
    assert [i for e in tokens for i in e.token_ids] == [lead] * max_tokens   # the bias forced them
    finish = next(m for m in out if isinstance(m, FinishEvent))
    return "".join(e.text for e in tokens), finish.finish_reason


def test_a_stop_string_completed_by_the_final_text_finishes_stop(tiny_loaded):
    """Known answer: one lead byte alone is held back (an incomplete character), then
    at the length limit becomes U+FFFD, which the stop string "\\ufffd" cuts: text "",
    finish "stop" (it was "length"). Without the stop the same run ends "length"."""
    assert _forced_lead_byte(tiny_loaded, 1, ()) == ("\ufffd", "length")
    assert _forced_lead_byte(tiny_loaded, 1, ("\ufffd",)) == ("", "stop")
    assert _forced_lead_byte(tiny_loaded, 2, ("\ufffd\ufffd",)) == ("", "stop")
    assert _forced_lead_byte(tiny_loaded, 2, ("\ufffdx",)) == ("\ufffd\ufffd", "length")


def test_a_resumed_request_whose_final_text_completes_a_stop_string_finishes_stop(tiny_loaded):
    """Its worker died after the last token (a lone lead byte) but before the finish: the
    resuming worker's flush finds the stop string, so the end is "stop", as uncut."""
    lead = _lead_byte_id(tiny_loaded.tokenizer)
    item = dataclasses.replace(_item("r1"), sampling=SamplingParams(
        max_tokens=1, temperature=0.0, stop=("\ufffd",), logit_bias=((lead, 100.0),)))
    loop, out = _loop(tiny_loaded)
    loop.handle(item.resumed([lead], 0))
    _run(loop)
    assert not [e for e in out if isinstance(e, TokenEvent) and e.text]
    (finish,) = [m for m in out if isinstance(m, FinishEvent)]
    assert (finish.finish_reason, finish.num_output_tokens) == ("stop", 1)
