"""The request a replayed trace line becomes."""
from __future__ import annotations

from agents_trace.replay.prompts import PromptBuilder
from agents_trace.replay.runner import ReplayOptions, _body
from cache.trace_format import TraceRecord


def test_a_flex_line_is_replayed_in_the_flex_tier_and_others_name_no_tier():
    prompts = PromptBuilder(block_size=4, vocab_size=256)
    options = ReplayOptions(base_url="http://x", api_key="k")
    flex = TraceRecord(0.0, 8, 2, session="s", hash_ids=[1, 2], service_tier="flex")
    path, body = _body(flex, prompts, options, "tiny")
    assert path == "/v1/completions" and body["service_tier"] == "flex" and len(body["prompt"]) == 8
    _, body = _body(TraceRecord(0.0, 8, 2, session="s", hash_ids=[1, 2]), prompts, options, "tiny")
    assert "service_tier" not in body
