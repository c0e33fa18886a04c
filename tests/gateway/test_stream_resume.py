"""A streamed reply whose worker is killed midway goes on from its last token on another
worker: the client gets the whole reply, log probabilities too, as if nothing had happened
(shards/dispatcher.py)."""
from __future__ import annotations

import json
import os
import signal
import time

import httpx

from tests.gateway.conftest import KEYS

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me a long story about Lyon."}],
        "max_tokens": 300, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        "logprobs": True, "top_logprobs": 1}


def _chunks(lines) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def _reply(chunks: list[dict]) -> tuple[str, str | None, dict | None, list[str]]:
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    scored = [entry["token"] for c in chunks if c.get("choices") and c["choices"][0].get("logprobs")
              for entry in c["choices"][0]["logprobs"]["content"]]
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    return text, finish[-1] if finish else None, usage[-1] if usage else None, scored


def test_a_stream_whose_worker_is_killed_midway_ends_whole_and_as_an_uncut_run(gateway, caplog):
    url, headers = f"{gateway.base_url}/v1/chat/completions", {"Authorization": f"Bearer {KEYS['alpha']}"}
    for _ in range(2):   # the second run finds its prompt cached on the worker the first ran on
        with httpx.stream("POST", url, json=BODY, headers=headers, timeout=60) as uncut:
            expected = _reply(_chunks(uncut.iter_lines()))
    assert expected[1] == "length" and expected[2]["completion_tokens"] == 300 == len(expected[3])
    assert expected[2]["prompt_tokens_details"]["cached_tokens"] > 0
    engine = gateway.state.backends["tiny"].engine
    with httpx.stream("POST", url, json=BODY, headers=headers, timeout=60) as cut:
        lines = cut.iter_lines()
        received = [next(line for line in lines if line.startswith("data: {"))]   # the stream has begun
        victim = engine.worker_of(cut.headers["x-request-id"])
        assert victim is not None
        os.kill(engine.worker_pid(victim), signal.SIGKILL)
        received += [line for line in lines if line]
    assert cut.status_code == 200 and received[-1] == "data: [DONE]"
    assert not any('"error"' in line for line in received)
    # the same text, finish and scored tokens, and the same usage: cached tokens too, those the
    # first worker found (the second prefilled the prompt and the sent output anew)
    assert _reply(_chunks(received)) == expected
    assert (f"stepahead: model 'tiny': worker {victim} killed by SIGKILL: 1 request(s) cut mid-reply go on from "
            "their last token on another worker; restarting it in ") in caplog.text
    deadline = time.monotonic() + 30
    while not engine.health()["workers"][victim]["ready"]:   # leave the shared gateway as found
        assert time.monotonic() < deadline, "the killed worker was not restarted"
        time.sleep(0.1)
