"""TTFT of an agent's steps through the gateway, its prompt spliced from the last step's
token ids or tokenized whole.

One gateway in this process (SmolLM2 by default, one worker), two tenants sending the
very same agent session step by step (the tool results of `bench_prompt_tokens`): the
tenant "spliced" goes through `PromptTokenCache` as every tenant does, the tenant "whole"
has each prompt tokenized whole (the baseline, the gateway before session 28). Each
tenant's prefix cache holds its own session (tenants never share blocks), so both pay the
same prefill; which tenant goes first alternates every step. Each step asks for one
token, so the request's time is its TTFT. A session ends before its prompt would pass
`--max-tokens` (SmolLM2's context is 8,192).
Prints one JSON line: per step and by band, median TTFT both ways, and
`ttft_ratio` = whole ÷ spliced.

    python benchmarks/bench_prompt_tokens_ttft.py [--model smollm2] [--steps 30] [--repeats 2]
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
import httpx  # noqa: E402

from benchmarks.bench_servers import InProcessGateway  # noqa: E402
from benchmarks.bench_prompt_tokens import BANDS, tool_result  # noqa: E402
from shards.chat_template import render_chat  # noqa: E402
from shards.special_text import MarkedTextEncoder  # noqa: E402

TENANTS = ("spliced", "whole")


class WholeForOneTenant:
    """The gateway's prompt token cache, except that `baseline` gets whole encodes."""

    def __init__(self, cache, tokenizer, baseline: str) -> None:
        self.cache, self.tokenizer, self.baseline = cache, tokenizer, baseline
        self.marked = MarkedTextEncoder.of(tokenizer)

    @property
    def stats(self):
        return self.cache.stats

    @property
    def bound(self):   # the prompt's past-the-context check before tokenizing: the cache's, both ways
        return self.cache.bound

    def encode(self, tenant: str, text: str, *, marked: bool = False) -> list[int]:
        if tenant == self.baseline:   # a chat prompt comes marked (shards/special_text.py)
            return self.marked.encode(text) if marked else list(self.tokenizer.encode(text, add_special_tokens=False))
        return self.cache.encode(tenant, text, marked=marked)


def gateway_app(args):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config

    config = parse_config({
        "models": [{"name": "m", "kind": "local", "path": args.model, "num_workers": args.workers,
                    "engine": {"policy": "lru", "num_hot_blocks": args.hot_blocks}}],
        "tenants": [{"name": t, "api_key_sha256": [key_digest(f"sk-bench-{t}")]} for t in TENANTS],
    })
    return build_app(config)


def run(args) -> dict:
    app = gateway_app(args)
    rng = random.Random(args.seed)
    rows = []   # (step, prompt tokens, {tenant: seconds})
    with InProcessGateway(app) as gateway:
        backend = app.state.gateway.backends["m"]
        backend.prompt_tokens = WholeForOneTenant(backend.prompt_tokens, backend.engine.tokenizer, "whole")
        clients = {t: httpx.Client(base_url=gateway.base_url, timeout=600,
                                   headers={"Authorization": f"Bearer sk-bench-{t}"}) for t in TENANTS}
        for repeat in range(args.repeats):
            messages = [{"role": "system", "content": "You are a careful coding agent. " * 20},
                        {"role": "user", "content": "Please fix the failing test in the repository."}]
            for step in range(args.steps):
                if len(render_chat(backend.engine.tokenizer, messages, TOOLS)) > args.max_tokens:
                    break
                times, num_tokens = {}, 0
                order = TENANTS if (step + repeat) % 2 == 0 else TENANTS[::-1]
                for tenant in order:
                    began = time.perf_counter()
                    reply = clients[tenant].post("/v1/chat/completions", json={
                        "model": "m", "messages": messages, "tools": TOOLS, "max_tokens": 1,
                        "temperature": 0}, headers={"x-session-id": f"{tenant}-{repeat}"})
                    times[tenant] = time.perf_counter() - began
                    if reply.status_code != 200:
                        raise SystemExit(f"step {step} of {tenant}: {reply.status_code} {reply.text}")
                    num_tokens = reply.json()["usage"]["prompt_tokens"]
                rows.append((step, num_tokens, times))
                call_id = f"call_{repeat}_{step}"
                messages = messages + [
                    {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
                     "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{step}.py"})}}]},
                    {"role": "tool", "tool_call_id": call_id, "content": tool_result(rng, args.tool_result_chars)}]
        stats = backend.prompt_tokens.stats
    return {"rows": rows, "cache": {"num_spliced": stats.num_spliced, "num_reused_ids": stats.num_reused_ids,
                                    "disabled": stats.disabled}}


TOOLS = [{"type": "function", "function": {"name": name, "description": f"{name} in the repository.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    for name in ("read_file", "write_file", "list_dir", "run_tests", "grep")]


def summary(rows) -> dict:
    def medians(selected) -> dict:
        whole = statistics.median(times["whole"] for _, _, times in selected) * 1e3
        spliced = statistics.median(times["spliced"] for _, _, times in selected) * 1e3
        ratios = [times["whole"] / times["spliced"] for _, _, times in selected]
        return {"steps": len(selected), "whole_ms": round(whole, 1), "spliced_ms": round(spliced, 1),
                "ttft_ratio": round(statistics.median(ratios), 3)}

    bands = {}
    for low, high in BANDS:
        selected = [row for row in rows if low <= row[1] < high]
        if selected:
            bands[f"{low}-{high if high < 10**9 else 'inf'}"] = medians(selected)
    return {"all": medians(rows), "bands": bands}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="the worker's model: tiny, smollm2, or a model directory")
    parser.add_argument("--workers", type=positive_int, default=1, help="worker processes of the gateway")
    parser.add_argument("--hot-blocks", type=positive_int, default=4096,
                        help="HOT tier blocks per worker (16 tokens each)")
    parser.add_argument("--steps", type=positive_int, default=30, help="agent steps per session at most")
    parser.add_argument("--repeats", type=positive_int, default=2, help="sessions, each tenant's fresh")
    parser.add_argument("--max-tokens", type=positive_int, default=7900,
                        help="tokens: end a session before its prompt passes this")
    parser.add_argument("--tool-result-chars", type=positive_int, default=800,
                        help="median length of a tool result, in characters")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the sessions")
    args = parser.parse_args()
    began = time.perf_counter()
    result = run(args)
    print(json.dumps({"model": args.model, **summary(result["rows"]), "cache": result["cache"],
                      "per_step": [{"step": step, "prompt_tokens": tokens,
                                    **{t: round(s * 1e3, 1) for t, s in times.items()}}
                                   for step, tokens, times in result["rows"]],
                      "wall_s": round(time.perf_counter() - began, 1)}))


if __name__ == "__main__":
    main()
