"""What hashing a prompt's blocks costs the gateway's event loop, per prompt length.

The engine hashes every prompt into chained, tenant-salted block hashes
(`cache.hashing.chain_hashes`) on the gateway's event loop before it routes the request,
so the time is added to every request's latency and blocks every other request meanwhile.
Baseline: block by block as `hash_blocks(split_blocks(...))` does (a tuple, a `struct`
encoding and a new blake2b object per block); contender: `chain_hashes`, which encodes the
prompt once and copies one prepared blake2b object per block. Both give the same values
(checked here on every prompt). In alternating rounds; prints one JSON line per prompt
length: medians over rounds of the median µs per prompt, and baseline / contender.

    python benchmarks/bench_block_hashing.py [--lengths 1024,8192,32768] [--block-size 16] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.hashing import chain_hashes, hash_blocks, split_blocks, tenant_salt  # noqa: E402


def block_by_block(token_ids: list[int], block_size: int, salt: bytes) -> list[int]:
    return hash_blocks(split_blocks(token_ids, block_size), salt)


WAYS = {"block_by_block": block_by_block, "chain_hashes": chain_hashes}


def time_per_prompt(way, prompts: list[list[int]], block_size: int, salt: bytes) -> float:
    took = []
    for prompt in prompts:
        started = time.perf_counter()
        way(prompt, block_size, salt)
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,8192,32768", help="prompt lengths in tokens")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=20, help="prompts timed per round and way")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng, salt = random.Random(args.seed), tenant_salt("bench")
    for length in (int(part) for part in args.lengths.split(",")):
        prompts = [[rng.randrange(49152) for _ in range(length)] for _ in range(args.prompts)]
        for prompt in prompts[:2]:
            if block_by_block(prompt, args.block_size, salt) != chain_hashes(prompt, args.block_size, salt):
                raise SystemExit(f"the two ways disagree on a prompt of {length} tokens")
        rounds: dict[str, list[float]] = {name: [] for name in WAYS}
        for round_index in range(args.rounds):
            for name in (list(WAYS) if round_index % 2 == 0 else list(reversed(WAYS))):
                rounds[name].append(time_per_prompt(WAYS[name], prompts, args.block_size, salt) * 1e6)
        medians = {name: statistics.median(values) for name, values in rounds.items()}
        print(json.dumps({"benchmark": "block_hashing", "prompt_tokens": length, "block_size": args.block_size,
                          "us_per_prompt": {name: round(value, 2) for name, value in medians.items()},
                          "us_per_prompt_rounds": {name: [round(v, 2) for v in values]
                                                   for name, values in rounds.items()},
                          "baseline_over_contender": round(medians["block_by_block"] / medians["chain_hashes"], 2)}),
              flush=True)


if __name__ == "__main__":
    main()
