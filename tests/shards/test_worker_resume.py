"""A request resumed on a worker after the one streaming it died (`WorkItem.resumed`):
it goes on as its uncut run would have, or ends at once when it had already ended."""
from __future__ import annotations

import dataclasses

import pytest

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from tests.shards.test_worker import _item, _loop, _run


def _tokens_and_text(events) -> tuple[list[int], str]:
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    return [i for e in tokens for i in e.token_ids], "".join(e.text for e in tokens)


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_a_resumed_request_goes_on_as_its_uncut_run_would_have(tiny_loaded, sampling):
    """Known answer: the tokens a worker sent before it died, then what another worker
    sends for the request resumed from them, are the uncut run's, with the same counts
    (sampled with a seed too: each position draws from its own seeding)."""
    request = _item("r1", max_tokens=20)
    if sampling == "seeded":
        request = dataclasses.replace(request, sampling=SamplingParams(
            max_tokens=20, temperature=1.5, seed=7, ignore_eos=True, frequency_penalty=0.5))
    loop, out = _loop(tiny_loaded)
    loop.handle(request)
    _run(loop)
    whole_ids, whole_text = _tokens_and_text(out)
    finish = out[-1]
    assert isinstance(finish, FinishEvent) and len(whole_ids) == 20
    sent = [e for e in out if isinstance(e, TokenEvent)][:8]   # what reached the client before the death
    sent_ids, sent_text = _tokens_and_text(sent)
    resumed = request.resumed(sent_ids, len(sent_text))
    loop, out = _loop(tiny_loaded)
    loop.handle(resumed)
    _run(loop)
    rest_ids, rest_text = _tokens_and_text(out)
    assert (sent_ids + rest_ids, sent_text + rest_text) == (whole_ids, whole_text)
    end = out[-1]
    assert (end.finish_reason, end.num_prompt_tokens, end.num_output_tokens) == ("length", 40, 20)
    assert end.num_prompt_tokens == finish.num_prompt_tokens
    # each worker's first event says what of the prompt it found cached, and which worker
    # it is; later ones nothing
    for events in (sent, [e for e in out if isinstance(e, TokenEvent)]):
        assert events[0].num_cached_tokens is not None and 0 <= events[0].num_cached_tokens <= 40
        assert events[0].worker_id == finish.worker_id and events[0].worker_id
        assert all(e.num_cached_tokens is None and e.worker_id is None for e in events[1:])


@pytest.mark.parametrize("case", ["max_tokens", "context", "stop"])
def test_a_request_cut_after_its_last_token_ends_at_once_as_it_would_have(tiny_loaded, case):
    """Its worker died between the last token and the finish: nothing more is generated."""
    loop, out = _loop(tiny_loaded)
    item = _item("r1", max_tokens=3 if case == "max_tokens" else 5)
    if case == "context":
        item = dataclasses.replace(item, prompt_token_ids=[7] * (loop.max_context - 3))
    sent_ids = tiny_loaded.tokenizer.encode("ab END", add_special_tokens=False) if case == "stop" else [65, 66, 67]
    if case == "stop":
        item = dataclasses.replace(item, sampling=dataclasses.replace(item.sampling, stop=(" END",)))
    loop.handle(item.resumed(sent_ids, 2))   # "ab" was sent; anything after it was held back
    _run(loop)
    end = out[-1]
    assert isinstance(end, FinishEvent) and end.num_output_tokens == len(sent_ids)
    assert end.finish_reason == ("stop" if case == "stop" else "length")
    held = "".join(e.text for e in out if isinstance(e, TokenEvent))
    text = tiny_loaded.tokenizer.decode(sent_ids)
    assert held == (text[2:text.index(" END")] if case == "stop" else text[2:])   # held back before the death
    assert not any(e.token_ids for e in out if isinstance(e, TokenEvent))
