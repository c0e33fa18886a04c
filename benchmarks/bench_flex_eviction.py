"""Agents' cached context while a batch runs: does evicting the blocks only flex (batch)
requests used first (`flex_blocks_evicted_first`, the default) keep agents' prefixes hot?

    python benchmarks/bench_flex_eviction.py [--model smollm2|tiny] [--rounds 1]

One worker whose KV memory holds the agents' sessions but not the batch's prompts as
well. Each mode starts `stepahead serve` afresh and runs the same agent sessions
(streamed chat completions whose context grows by the reply and a tool result each step,
a tool's wait between steps); in the batch modes a Batch API batch (lines naming no tier:
flex) starts with them. Modes: `alone` (no batch), `flex_first` (the default), `lru_order`
(`flex_blocks_evicted_first = false`: batch blocks compete like any). Prints one JSON line:
per mode the agents' TTFT (p50, mean) over the steps after the first, the share of their
prompt tokens served from the cache, and the batch's wall time; medians over rounds; and
the ratios lru_order / flex_first.
"""
from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_int  # noqa: E402
from bench_servers import (API_KEY, batch_outcome, bench_tenant_toml, fresh_gateway, medians,  # noqa: E402
                           rounded, start_batch)

MODES = {"alone": None, "flex_first": True, "lru_order": False}   # mode -> flex_blocks_evicted_first


def config_toml(model: str, hot_blocks: int, policy: str, flex_first: bool) -> str:
    return f"""
[server]
batch_concurrency = 2

[[models]]
name = "{model}"
kind = "local"
path = "{model}"
num_workers = 1

[models.engine]
num_hot_blocks = {hot_blocks}
policy = "{policy}"
flex_blocks_evicted_first = {str(flex_first).lower()}
""" + bench_tenant_toml()


VOCABULARY = ("time year people way day man thing woman life child world school state family student group "
              "country problem hand part place case week company system program question work government "
              "number night point home water room mother area money story fact month lot right study book "
              "eye job word business issue side kind head house service friend father power hour game line").split()


def words(tag: str, count: int) -> str:
    """`count` common words (about a token each), the same for the same `tag`."""
    rng = random.Random(tag)
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def batch_file(model: str, args) -> bytes:
    return "\n".join(json.dumps({"custom_id": f"b{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": model, "max_tokens": args.batch_tokens, "ignore_eos": True,
        "messages": [{"role": "user", "content": f"Document {n}: {words(f'doc{n}', args.batch_words)}\nSummarize."}]}})
        for n in range(args.batch_requests)).encode()


async def agent_session(client: httpx.AsyncClient, model: str, tag: str, args) -> list[tuple[float, int, int]]:
    """(TTFT, prompt tokens, cached tokens) per step."""
    messages = [{"role": "system", "content": f"You are agent {tag}. Tools: {words(f'{tag}-tool', args.system_words)}"},
                {"role": "user", "content": f"Task for {tag}: {words(f'{tag}-task', 20)}"}]
    steps = []
    for n in range(args.steps):
        body = {"model": model, "max_tokens": args.step_tokens, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}, "messages": messages}
        started_s = time.perf_counter()
        first_s, text, usage = None, [], None
        async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
            async for line in reply.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    if choice["delta"].get("content"):
                        first_s = first_s or time.perf_counter()
                        text.append(choice["delta"]["content"])
                usage = chunk.get("usage") or usage
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        steps.append(((first_s or time.perf_counter()) - started_s, (usage or {}).get("prompt_tokens", 0), cached))
        messages += [{"role": "assistant", "content": "".join(text)},
                     {"role": "user", "content": f"Tool result {n}: {words(f'{tag}-r{n}', args.result_words)}"}]
        await asyncio.sleep(args.tool_s)
    return steps


async def one_mode(base_url: str, model: str, mode: str, args) -> dict:
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"},
                                 timeout=900) as client:
        batch_id = None
        if MODES[mode] is not None:
            batch_started_s = time.perf_counter()
            batch_id = await start_batch(client, batch_file(model, args))
        sessions = await asyncio.gather(*(agent_session(client, model, f"a{s}", args)
                                          for s in range(args.sessions)))
        later = [step for steps in sessions for step in steps[1:]]   # the first step has nothing cached
        ttfts = [ttft for ttft, _, _ in later]
        result = {"ttft_p50_s": statistics.median(ttfts), "ttft_mean_s": statistics.fmean(ttfts),
                  "cached_share": sum(c for _, _, c in later) / max(1, sum(p for _, p, _ in later)),
                  "prompt_tokens_last_step": max(steps[-1][1] for steps in sessions)}
        if batch_id is not None:
            result.update(await batch_outcome(client, batch_id, batch_started_s))
    return rounded(result)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"),
                        help="whose weights the worker loads")
    parser.add_argument("--rounds", type=positive_int, default=1, help="each mode this many times, alternating")
    parser.add_argument("--policy", default="lru", help="the workers' cache policy")
    parser.add_argument("--hot-blocks", type=positive_int, default=240, help="the worker's KV memory, 16-token blocks")
    parser.add_argument("--sessions", type=positive_int, default=3,
                        help="interactive agent sessions, running at once")
    parser.add_argument("--steps", type=positive_int, default=6, help="steps per agent session")
    parser.add_argument("--step-tokens", type=positive_int, default=16, help="tokens each agent step generates")
    parser.add_argument("--system-words", type=positive_int, default=700,
                        help="words of each session's system prompt")
    parser.add_argument("--result-words", type=positive_int, default=30, help="words of each tool result a step adds")
    parser.add_argument("--tool-s", type=non_negative_float, default=3.0, help="the tool's wait between steps")
    parser.add_argument("--batch-requests", type=positive_int, default=16,
                        help="flex (batch) requests sent alongside the sessions")
    parser.add_argument("--batch-words", type=positive_int, default=300, help="words of each batch request's prompt")
    parser.add_argument("--batch-tokens", type=positive_int, default=32, help="tokens each batch request generates")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    modes = [mode for mode in args.modes.split(",") if mode in MODES]
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for round_index in range(args.rounds):
        for mode in modes:
            config = config_toml(args.model, args.hot_blocks, args.policy, MODES[mode] is not False)
            with fresh_gateway(config, "bench-flex-") as base_url:
                runs[mode].append(asyncio.run(one_mode(base_url, args.model, mode, args)))
            print(f"round {round_index + 1}/{args.rounds} {mode}: {runs[mode][-1]}", file=sys.stderr)
    print(json.dumps({"benchmark": "flex_eviction", "model": args.model, "args": vars(args),
                      "summary": summarize(runs), "runs": runs}))
    return 0


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Each mode's medians over its rounds and, with both orders, the old order's over
    flex first's."""
    summary: dict = medians(runs)
    if "flex_first" in summary and "lru_order" in summary:
        first, lru = summary["flex_first"], summary["lru_order"]
        summary["lru_order_over_flex_first"] = {key: round(lru[key] / first[key], 3) if first[key] else None
                                                for key in ("ttft_mean_s", "ttft_p50_s", "cached_share", "batch_s")}
    return summary


if __name__ == "__main__":
    sys.exit(main())
