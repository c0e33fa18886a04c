"""What hashing a prompt's blocks costs the gateway's event loop, per prompt length.

The engine hashes every prompt into chained, tenant-salted block hashes on the gateway's
event loop before it routes the request, so the time is added to every request's latency
and blocks every other request meanwhile. Two comparisons, each in alternating rounds,
medians over rounds of the median µs per prompt; one JSON line per prompt length:
- `us_per_prompt` on independent random prompts: baseline block by block as
  `hash_blocks(split_blocks(...))` does (a tuple, a `struct` encoding and a new blake2b
  object per block); contender `chain_hashes` (the prompt encoded at once, one prepared
  blake2b object copied per block);
- `agent_session`: one session's steps growing from half the length to the length by
  `--step-tokens` (each step re-sends the last; each a list of its own ints, as the
  gateway's prompt token cache hands them out): baseline `chain_hashes` on every step;
  contender `SessionHashes` (what the engine runs), which compares the prompt with the
  last one and hashes only the new blocks.
All ways give the same values (checked here).

    python benchmarks/bench_block_hashing.py [--lengths 1024,8192,32768] [--block-size 16] [--rounds 5]
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from cache.hashing import chain_hashes, hash_blocks, split_blocks, tenant_salt  # noqa: E402
from cache.session_hashes import SessionHashes  # noqa: E402


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


def time_session_steps(way: str, steps: list[list[int]], block_size: int, salt: bytes) -> float:
    """Median µs per step of one session (a fresh memo: its first step is hashed whole)."""
    memo, took = SessionHashes(block_size), []
    for step in steps:
        started = time.perf_counter()
        if way == "session_hashes":
            memo.hashes("bench", "session", step, salt)
        else:
            chain_hashes(step, block_size, salt)
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6


def agent_session(length: int, block_size: int, step_tokens: int, rounds: int, rng, salt: bytes) -> dict:
    whole = array("i", [rng.randrange(49152) for _ in range(length)])
    # each step a list of its own ints, as the prompt token cache's `tolist()` gives them
    steps = [whole[:end].tolist() for end in range(length // 2, length + 1, step_tokens)]
    memo = SessionHashes(block_size)
    if any(memo.hashes("bench", "check", step, salt) != chain_hashes(step, block_size, salt) for step in steps):
        raise SystemExit(f"SessionHashes disagrees with chain_hashes in a session of {length} tokens")
    per_round: dict[str, list[float]] = {"chain_hashes": [], "session_hashes": []}
    for round_index in range(rounds):
        for way in (list(per_round) if round_index % 2 == 0 else list(reversed(per_round))):
            per_round[way].append(time_session_steps(way, steps, block_size, salt))
    medians = {way: statistics.median(values) for way, values in per_round.items()}
    return {"steps": len(steps), "step_tokens": step_tokens,
            "us_per_step": {way: round(value, 2) for way, value in medians.items()},
            "us_per_step_rounds": {way: [round(v, 2) for v in values] for way, values in per_round.items()},
            "baseline_over_contender": round(medians["chain_hashes"] / medians["session_hashes"], 2)}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--lengths", type=positive_ints, default="1024,8192,32768", help="prompt lengths in tokens")
    parser.add_argument("--block-size", type=positive_int, default=16, help="tokens per block")
    parser.add_argument("--prompts", type=positive_int, default=20, help="prompts timed per round and way")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of both ways; the figures are medians over them")
    parser.add_argument("--step-tokens", type=positive_int, default=512, help="what each agent step adds")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the prompts' token ids")
    args = parser.parse_args()
    rng, salt = random.Random(args.seed), tenant_salt("bench")
    for length in args.lengths:
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
                          "baseline_over_contender": round(medians["block_by_block"] / medians["chain_hashes"], 2),
                          "agent_session": agent_session(length, args.block_size, args.step_tokens, args.rounds, rng,
                                                         salt)}),
              flush=True)


if __name__ == "__main__":
    main()
