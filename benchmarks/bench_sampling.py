"""What drawing a token costs a worker, per running request and token, with temperature
and with `top_p`.

The baseline draws as shards/sampling.py did before session 34: `torch.multinomial` over
the whole vocabulary (one random number per token of it), and for `top_p` a sort of the
whole vocabulary. The contender is `shards.sampling.sample_next`: one uniform draw into
the cumulative sum, and the nucleus from the likeliest 64 (then 1,024) tokens before any
sort. Both draw from the same rows of real next-token logits (a model run over the
project's docs), one torch thread as a worker runs, in alternating rounds after a
warm-up; the contender's draws are checked to fall in the nucleus and, over all rows and
rounds, to pick each row's likeliest token about as often as the baseline's. Prints one
JSON line: per setting, median µs per draw of each and `baseline_over_contender`.

    python benchmarks/bench_sampling.py [--model smollm2|tiny] [--rows 200] [--rounds 5]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from shards.model_loader import load_model  # noqa: E402
from shards.protocol import SamplingParams  # noqa: E402
from shards.sampling import nucleus, sample_next  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"temperature 0.7": SamplingParams(temperature=0.7),
            "temperature 0.7, top_p 0.95": SamplingParams(temperature=0.7, top_p=0.95),
            "temperature 1.0, top_p 0.9": SamplingParams(temperature=1.0, top_p=0.9)}


def multinomial_draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """The baseline."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        keep = (cumulative - sorted_probs) < params.top_p
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return int(order[choice].item())
    return int(torch.multinomial(probs, 1, generator=generator).item())


def next_token_logits(model_name: str, num_rows: int) -> torch.Tensor:
    """`[num_rows, vocab]` logits: the model's next-token scores along the docs' text."""
    loaded = load_model(model_name)
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    ids = loaded.tokenizer.encode(text, add_special_tokens=False)[:num_rows]
    with torch.inference_mode():
        return loaded.model(input_ids=torch.tensor([ids])).logits[0].float()


def timed(draw, rows: torch.Tensor, params: SamplingParams, seed: int) -> tuple[float, list[int]]:
    generator = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    tokens = [draw(row, params, generator) for row in rows]
    return (time.perf_counter() - started) / len(rows), tokens


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="whose logits: smollm2 (default) or tiny")
    parser.add_argument("--rows", type=positive_int, default=200, help="next-token rows drawn from")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of both ways; the figures are medians over them")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = next_token_logits(args.model, args.rows)
    likeliest = rows.argmax(dim=-1).tolist()
    draws = {"baseline": multinomial_draw, "contender": sample_next}
    results = []
    for setting, params in SETTINGS.items():
        for draw in draws.values():   # warm-up
            timed(draw, rows[:10], params, 0)
        times: dict[str, list[float]] = {name: [] for name in draws}
        hits = {name: 0 for name in draws}
        for round_index in range(args.rounds):
            order = list(draws) if round_index % 2 == 0 else list(reversed(draws))
            for name in order:
                seconds, tokens = timed(draws[name], rows, params, round_index)
                times[name].append(seconds)
                hits[name] += sum(t == best for t, best in zip(tokens, likeliest))
                if name == "contender" and params.top_p < 1.0:
                    for row, token in zip(rows, tokens):
                        weights, ids = nucleus(torch.softmax(row / params.temperature, dim=-1), params.top_p)
                        assert token in ids[weights > 0].tolist(), "a draw outside the nucleus"
        baseline, contender = statistics.median(times["baseline"]), statistics.median(times["contender"])
        num_draws = args.rounds * len(rows)
        results.append({"setting": setting, "baseline_us": round(baseline * 1e6, 1),
                        "contender_us": round(contender * 1e6, 1),
                        "baseline_over_contender": round(baseline / contender, 2),
                        "likeliest_share": {name: round(hits[name] / num_draws, 3) for name in draws}})
    print(json.dumps({"model": args.model, "vocab": rows.shape[-1], "rows": len(rows), "rounds": args.rounds,
                      "settings": results}))


if __name__ == "__main__":
    main()
