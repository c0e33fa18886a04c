"""The replay client's timings: TTFT at the first generated piece, inter-token gaps
between chunks that carry generated pieces (a finish-only chunk is no token)."""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web

from agents_trace.replay.client import RequestResult, stream_request


async def _streamed(chunks: list[dict], pause_s: float) -> RequestResult:
    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(pause_s)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as client:
            return await stream_request(client, f"http://127.0.0.1:{port}/v1/chat/completions", {"model": "m"}, {},
                                        RequestResult("t", "s", 0, 0.0), time.perf_counter())
    finally:
        await runner.cleanup()


def _delta(content: str | None, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": {} if content is None else {"content": content},
                         "finish_reason": finish}]}


async def test_a_finish_only_chunk_is_no_inter_token_gap():
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                      "prompt_tokens_details": {"cached_tokens": 3}}}
    result = await _streamed([_delta("a"), _delta("b"), _delta(None, "stop"), usage], pause_s=0.05)
    assert result.error is None and result.ttft_s is not None
    assert len(result.inter_token_s) == 1 and result.inter_token_s[0] >= 0.04   # a → b only
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens) == (5, 2, 3)


async def test_an_empty_reply_has_its_finish_as_first_event_and_no_gaps():
    result = await _streamed([_delta(None, "stop")], pause_s=0.05)
    assert result.error is None and result.ttft_s is not None and result.inter_token_s == []
    assert result.ttft_s < result.e2e_s
