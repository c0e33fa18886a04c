"""What tokenizing an agent's prompt costs per step: whole, or spliced from the last step.

Agent sessions (tool orders from ../shared/data's BFCL multi-turn sequences, tool
results of log-normal length) are rendered with the model's chat template step by step,
sessions of several tenants interleaved as a gateway sees them. Every step is tokenized
both ways in the same run, back to back: `tokenizer.encode` on the whole prompt (the
baseline, what the gateway did before) and `PromptTokenCache.encode` (the contender; its
checks against a whole encode are included in its time). Both answers are compared at
every step. Prints one JSON line: medians per context-length band and overall, with
`speedup` = baseline ÷ contender.

    python benchmarks/bench_prompt_tokens.py [--model smollm2] [--tenants 2] [--sessions 4] [--steps 40]
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
from gateway.prompt_token_cache import PromptTokenCache  # noqa: E402
from shards.chat_template import render_chat_prompt  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bfcl_multiturn_toolseq.jsonl"
BANDS = ((0, 2000), (2000, 4000), (4000, 8000), (8000, 10**9))
WORDS = ("def return self path file value error result the agent found line total status open "
         "read write list item count None True False if else for in x y z 0 1 2 42 100").split()


def load_tokenizer(model: str):
    from shards.model_files import load_tokenizer as load

    if model == "smollm2":
        from shards.model_loader import load_model_files

        load_model_files(model)   # converts the embedded GGUF once, if not done yet
    return load(model)


def tool_orders(rng: random.Random, num: int) -> list[list[str]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()] if DATA.exists() else []
    orders = [[step for step in row["steps"] if step.isidentifier() and step.islower()] for row in rows]
    orders = [order for order in orders if order] or [["ls", "cd", "grep", "cat"]]
    return [rng.choice(orders) for _ in range(num)]


def tool_result(rng: random.Random, median_chars: int) -> str:
    size = int(rng.lognormvariate(0, 0.8) * median_chars)
    words, length = [], 0
    while length < size:
        word = rng.choice(WORDS) + rng.choice((" ", " ", "\n", "(", "): ", ", "))
        words.append(word)
        length += len(word)
    return "".join(words)


def sessions(args, rng: random.Random):
    """Per session: (tenant, tools, the prompts' messages at each step)."""
    out = []
    for index, order in enumerate(tool_orders(rng, args.tenants * args.sessions)):
        names = sorted(set(order))
        tools = [{"type": "function", "function": {"name": name, "description": f"Run {name}.", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}} for name in names]
        messages = [{"role": "system", "content": "You are a careful coding agent. " * 20},
                    {"role": "user", "content": "Please fix the failing test in the repository."}]
        steps = []
        for step in range(args.steps):
            steps.append(list(messages))
            name, call_id = order[step % len(order)], f"call_{index}_{step}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps({"path": f"src/m{step}.py"})}}]})
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": tool_result(rng, args.tool_result_chars)})
        out.append((f"tenant{index % args.tenants}", tools, steps))
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2",
                        help="whose tokenizer and chat template: tiny, smollm2, or a model directory")
    parser.add_argument("--tenants", type=positive_int, default=2, help="tenants of the generated sessions")
    parser.add_argument("--sessions", type=positive_int, default=4, help="per tenant, interleaved")
    parser.add_argument("--steps", type=positive_int, default=40, help="agent steps per session")
    parser.add_argument("--tool-result-chars", type=positive_int, default=800, help="median length of a tool result")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the sessions")
    args = parser.parse_args()
    tokenizer = load_tokenizer(args.model)
    cache = PromptTokenCache(tokenizer)
    rows = []   # (num_tokens, baseline_s, contender_s)
    began = time.perf_counter()
    plan = sessions(args, random.Random(args.seed))
    for step in range(args.steps):
        for tenant, tools, steps in plan:
            text = render_chat_prompt(tokenizer, steps[step], tools)   # as the gateway renders: marked text
            t0 = time.perf_counter()
            whole = tokenizer.encode(text, add_special_tokens=False)   # the same ids: no client text spells a token
            t1 = time.perf_counter()
            spliced = cache.encode(tenant, text, marked=True)
            t2 = time.perf_counter()
            if spliced != list(whole):
                raise SystemExit(f"the ids differ at step {step} of a session of {tenant}")
            rows.append((len(whole), t1 - t0, t2 - t1))
    bands = {}
    for low, high in BANDS:
        band = [row for row in rows if low <= row[0] < high]
        if band:
            baseline = statistics.median(row[1] for row in band) * 1e3
            contender = statistics.median(row[2] for row in band) * 1e3
            bands[f"{low}-{high if high < 10**9 else 'inf'}"] = {
                "steps": len(band), "baseline_ms": round(baseline, 3), "contender_ms": round(contender, 3),
                "speedup": round(baseline / contender, 2)}
    baseline_total, contender_total = sum(row[1] for row in rows), sum(row[2] for row in rows)
    print(json.dumps({
        "model": args.model, "steps": len(rows), "max_tokens": max(row[0] for row in rows),
        "median_baseline_ms": round(statistics.median(row[1] for row in rows) * 1e3, 3),
        "median_contender_ms": round(statistics.median(row[2] for row in rows) * 1e3, 3),
        "total_speedup": round(baseline_total / contender_total, 2), "bands": bands,
        "cache": {"num_spliced": cache.stats.num_spliced, "num_reused_ids": cache.stats.num_reused_ids,
                  "num_checked": cache.stats.num_checked, "disabled": cache.stats.disabled},
        "wall_s": round(time.perf_counter() - began, 1)}))


if __name__ == "__main__":
    main()
