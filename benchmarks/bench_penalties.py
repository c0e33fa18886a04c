"""What OpenAI's frequency and presence penalties cost a worker per token, as replies grow.

The baseline counts the output's tokens anew at every token (a tensor of all the output
ids, then `torch.unique`), as shards/sampling.py did before session 34; the contender is
`shards.sampling.OutputPenalties`, the sequence's penalties kept up to date a token at a time.
Both apply the same penalties to the same `[vocab]` logits (SmolLM2's vocabulary size)
along the same random reply and must give equal logits; alternating rounds after a
warm-up. Prints one JSON line: per reply length, the median µs per token of each and
`recount_over_kept`.

    python benchmarks/bench_penalties.py [--lengths 100,500,2000,4000] [--rounds 5] [--vocab 49152]
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from shards.protocol import SamplingParams  # noqa: E402
from shards.sampling import OutputPenalties, adjusted_logits  # noqa: E402

PARAMS = SamplingParams(presence_penalty=0.5, frequency_penalty=0.3)


def recounted(logits: torch.Tensor, params: SamplingParams, output_ids: list[int]) -> torch.Tensor:
    """The baseline: the penalties from the output's ids counted anew."""
    adjusted = logits.float().clone()
    ids, counts = torch.unique(torch.tensor(output_ids), return_counts=True)
    adjusted[ids] -= params.frequency_penalty * counts + params.presence_penalty
    return adjusted


def seconds_per_token(name: str, logits: torch.Tensor, reply: list[int]) -> tuple[float, torch.Tensor]:
    """Time the penalties at each token of `reply`; the last logits they gave."""
    penalties = OutputPenalties()
    output: list[int] = [reply[0]]
    started = time.perf_counter()
    for token in reply[1:]:
        if name == "recount":
            adjusted = recounted(logits, PARAMS, output)
        else:
            adjusted = adjusted_logits(logits, PARAMS, output, penalties)
        output.append(token)
    return (time.perf_counter() - started) / (len(reply) - 1), adjusted


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=positive_ints, default="100,500,2000,4000", help="reply lengths in tokens")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of both ways; the figures are medians over them")
    parser.add_argument("--vocab", type=positive_int, default=49152, help="vocabulary size (default %(default)s, SmolLM2's)")
    args = parser.parse_args()
    torch.set_num_threads(1)   # a worker's setting
    rng = random.Random(7)
    logits = torch.randn(args.vocab, generator=torch.Generator().manual_seed(7))
    rows = []
    for length in args.lengths:
        reply = [rng.randrange(args.vocab // 8) for _ in range(length)]   # repeats, as text has
        for name in ("recount", "kept"):   # warm-up
            seconds_per_token(name, logits, reply[:20])
        times: dict[str, list[float]] = {"recount": [], "kept": []}
        for round_index in range(args.rounds):
            order = ["recount", "kept"] if round_index % 2 == 0 else ["kept", "recount"]
            last = {}
            for name in order:
                seconds, last[name] = seconds_per_token(name, logits, reply)
                times[name].append(seconds)
            assert torch.allclose(last["recount"], last["kept"]), "the two penalties differ"
        recount, kept = statistics.median(times["recount"]), statistics.median(times["kept"])
        rows.append({"reply_tokens": length, "recount_us_per_token": round(recount * 1e6, 2),
                     "kept_us_per_token": round(kept * 1e6, 2), "recount_over_kept": round(recount / kept, 2)})
    print(json.dumps({"vocab": args.vocab, "rounds": args.rounds, "replies": rows}))


if __name__ == "__main__":
    main()
