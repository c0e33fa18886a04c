"""A batch beside many agents, in the trace simulator: how much of the agents' cache does
flex-first eviction (`flex_blocks_evicted_first`, `cache.background_blocks`) save?

    python benchmarks/bench_flex_sim.py [--seed 0] [--hot-blocks 1000,2000]

The generated multi-tenant agent workload (`stepahead workload generate`'s defaults: 4
tenants, 40 sessions each), and the same with the tenants' Batch API jobs
(`--batch-per-s`: one flex line of `--batch-tokens` fresh prompt tokens every
`1 / --batch-per-s` seconds across the workload's span, no session, as batch lines reach
the workers). Each policy at each HOT
size replays the agents alone, then with the batch and flex first (the default), then
with the batch competing like any request (`--no-flex-first`), through the same
`cache/` code the server runs. Deterministic: no timing noise. Prints one JSON line per
replay and a summary line: per policy and size, the agents' block hit rate and mean
simulated TTFT in each case, and the old order's TTFT over flex first's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from agents_trace.workload.generator import WorkloadConfig, generate_workload  # noqa: E402
from agents_trace.workload.tool_patterns import load_patterns  # noqa: E402
from cache.cli_args import names_from, non_negative_float, positive_int, positive_ints  # noqa: E402
from cache.sim.replay import POLICY_NAMES, SimConfig, replay  # noqa: E402
from cache.sim.requests import to_sim_requests  # noqa: E402


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seed", type=int, default=0, help="random seed of the generated workload")
    parser.add_argument("--tenants", type=positive_int, default=4, help="tenants of the generated workload")
    parser.add_argument("--sessions", type=positive_int, default=40, help="agent sessions per tenant")
    parser.add_argument("--batch-per-s", type=non_negative_float, default=0.5,
                        help="batch lines a second, all tenants")
    parser.add_argument("--batch-tokens", type=positive_int, default=2048, help="prompt tokens of each batch line")
    parser.add_argument("--hot-blocks", type=positive_ints, default=(1000, 2000),
                        help="HOT tier sizes in blocks, comma-separated (default: 1000,2000)")
    parser.add_argument("--policies", type=names_from(POLICY_NAMES, "policy"), default=("lru", "predictive"),
                        help=f"comma-separated, out of {', '.join(POLICY_NAMES)} (default: lru,predictive)")
    args = parser.parse_args()
    try:
        config = WorkloadConfig(num_tenants=args.tenants, num_sessions=args.sessions, seed=args.seed,
                                batch_lines_per_s=args.batch_per_s, batch_prompt_tokens=args.batch_tokens)
    except ValueError as exc:   # past a limit of the generator's: its message names its own flags
        parser.error(_own_flags(str(exc)))
    mixed = generate_workload(config, load_patterns())
    agents = [record for record in mixed if record.service_tier != "flex"]   # the sessions, as generated alone
    traces = {"alone": to_sim_requests(agents, config.block_size), "batch": to_sim_requests(mixed, config.block_size)}
    summary = []
    for policy in args.policies:
        for hot in args.hot_blocks:
            row = {"policy": policy, "hot_blocks": hot}
            for case, trace, flex_first in (("alone", "alone", True), ("flex_first", "batch", True),
                                            ("old_order", "batch", False)):
                result = replay(traces[trace], SimConfig(num_hot_blocks=hot, policy=policy,
                                                         block_size=config.block_size, flex_first=flex_first)).to_json()
                print(json.dumps({"case": case, **result}))
                rate = result.get("interactive_block_hit_rate", result["block_hit_rate"])
                ttft = result.get("interactive_ttft_mean_s", result["sim_ttft_mean_s"])
                row[case] = {"agents_block_hit_rate": rate, "agents_ttft_mean_s": ttft}
            row["old_order_over_flex_first_ttft"] = round(row["old_order"]["agents_ttft_mean_s"]
                                                          / row["flex_first"]["agents_ttft_mean_s"], 3)
            summary.append(row)
    print(json.dumps({"benchmark": "flex_sim", "args": vars(args), "agent_requests": len(agents),
                      "batch_requests": len(mixed) - len(agents), "summary": summary}))
    return 0


def _own_flags(message: str) -> str:
    """A WorkloadConfig refusal with `stepahead workload generate`'s flags renamed to this script's."""
    for generator_flag, own_flag in (("--batch-lines-per-s", "--batch-per-s"),
                                     ("--batch-prompt-tokens", "--batch-tokens")):
        message = message.replace(generator_flag, own_flag)
    return message


if __name__ == "__main__":
    sys.exit(main())
