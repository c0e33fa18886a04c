"""What `truncation: "auto"` costs on a long conversation, in one process and run: the
Responses request of `--turns` short turns, far past the tiny model's context, answered
with its oldest turns cut, by the gateway's search for the fewest turns to cut (the
contender: doubling, then halving) and by cutting one turn at a time (the baseline, as
before 2026-12-06: each try renders the whole conversation). Everything else is the same
code path (the real route, a real tiny-model worker). Prints one JSON line: medians of
`--repeats` requests each, the prompt tokens both kept (they must be equal), the speedup.

    python benchmarks/bench_truncation.py [--turns 300] [--repeats 3]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from gateway.errors import ApiError  # noqa: E402
from gateway.responses_truncation import TurnCuts, fewest_turns_cut, is_too_long  # noqa: E402

KEY = "sk-bench-truncation"


async def one_turn_at_a_time(cuts: TurnCuts, outcome_of):
    """The baseline: try 1, 2, 3, ... turns cut until one fits."""
    for num_cut in range(1, cuts.num_cuts + 1):
        try:
            outcome = await outcome_of(num_cut)
        except ApiError as error:
            outcome = error
        if not (isinstance(outcome, ApiError) and is_too_long(outcome)) or num_cut == cuts.num_cuts:
            return num_cut, outcome


def conversation(num_turns: int) -> list[dict]:
    items = []
    for turn in range(num_turns):
        items += [{"role": "user", "content": f"Step {turn}: " + "look this up " * 8},
                  {"role": "assistant", "content": f"Done with step {turn}."}]
    return items + [{"role": "user", "content": "Summarise."}]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--turns", type=positive_int, default=300,
                        help="turns of the conversation that is cut to fit")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs of each way; the figures are their medians")
    args = parser.parse_args()
    import gateway.responses_routes as routes
    from starlette.testclient import TestClient

    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    app = build_app(parse_config({
        "server": {"responses_db": ":memory:"}, "tracing": {"enabled": False},
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": "bench", "api_key_sha256": [key_digest(KEY)]}]}))
    body = {"model": "tiny", "input": conversation(args.turns), "max_output_tokens": 1, "truncation": "auto",
            "store": False}
    results = {}
    with TestClient(app) as client:
        for name, search in (("one_turn_at_a_time", one_turn_at_a_time), ("fewest_turns_search", fewest_turns_cut)):
            routes.fewest_turns_cut = search
            times, input_tokens = [], set()
            for _ in range(args.repeats):
                began = time.perf_counter()
                reply = client.post("/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"})
                times.append(time.perf_counter() - began)
                if reply.status_code != 200:
                    raise SystemExit(f"{name}: {reply.status_code} {reply.text[:300]}")
                input_tokens.add(reply.json()["usage"]["input_tokens"])
            results[name] = {"median_s": round(statistics.median(times), 3), "input_tokens": sorted(input_tokens)}
    routes.fewest_turns_cut = fewest_turns_cut
    same = results["one_turn_at_a_time"]["input_tokens"] == results["fewest_turns_search"]["input_tokens"]
    print(json.dumps({"benchmark": "truncation_auto", "turns": args.turns, "repeats": args.repeats, **results,
                      "same_input_tokens": same,
                      "speedup": round(results["one_turn_at_a_time"]["median_s"]
                                       / results["fewest_turns_search"]["median_s"], 2)}))


if __name__ == "__main__":
    main()
