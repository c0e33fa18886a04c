"""Cache policies side by side: LRU, predictive, the anchors and Belady on the same traces, one run.

The anchors are the published agent-aware policies we must beat (cache/policies):
`ttl` (Continuum-style TTL pins across tool calls) and `kvflow` (KVFlow-style
steps-to-execution eviction with next-step prefetch), both told what those systems are
told (the tool a response asked for and that tool's past durations, cache/tool_call_source.py).

Traces:
- the Mooncake conversation trace (512-token blocks, no sessions: they are inferred) at
  1k, 4k and 16k HOT blocks, plus a HOT+HOST configuration; each on the whole file, on
  its first half alone ("train": every default of the predictive policy was chosen
  looking at this half only) and on its second half after warming up on the first
  ("validation": measured on requests never looked at while choosing);
- a multi-tenant agent workload from the workload generator (default knobs, seed 0 =
  train, seed 1 = validation) at several HOT sizes and a HOT+HOST configuration, with the
  built-in gap forecaster and, where `agents_trace.predict` imports, the HMM predictor
  through its cache adapter (`predictive+hmm`), and that predictor from nothing
  (`predictive+hmm-cold`: a new deployment's cold start, sessions ended after the
  gateway's 15 min idle timeout and each tenant refitted when due);
- the same workload four times as long (160 sessions per tenant, trace `agent-long`; not
  with `--quick`): the 40-session trace spends much of its length ramping up and down,
  this one mostly in steady state, at 1k-8k HOT blocks.
Diagnostics: the predictive policy fed oracle forecasts (`who`: whether each session
comes back; `exact`: when) separates what the policy does with a forecast from how good
the forecast is; on the agent workload `predictive[model]` is fed the generator's own
distributions (model_oracle.py): the best any forecaster that cannot see the future does.

Prints one JSON line per replay, then one summary line with, per trace and capacity,
`gap_closed` = (predictive - lru) / (belady - lru) in block hit rate, `ttft_ratio` =
lru / predictive mean simulated TTFT (the same for every other label),
`best_anchor_ttft_ratio` = the best anchor's mean simulated TTFT / predictive's (> 1:
predictive is ahead; `best_anchor_ttft_ratio_hmm`: / predictive+hmm's, `_hmm_cold`: / predictive+hmm-cold's), and
`belady_is_bound` (Belady at or above the others in block hits, else a note). Draws
docs/policies_mooncake.png, docs/policies_agent.png and docs/policies_agent_long.png.

    python benchmarks/bench_policies.py            # about 5 minutes on 2 cores
    python benchmarks/bench_policies.py --quick    # fewer capacities, no diagnostics

Its inputs are checked before any run (one `error:` line, exit status 2): a `--mooncake`
file that cannot be read, is no trace or holds fewer than 2 requests (its first half is a
split of its own), and an `--out-dir` where the plots cannot be written. The summary line
is printed before the plots are drawn: a plot that fails (exit status 2) never loses it.

Ctrl+C stops it with one line on stderr and exit status 130: stdout then holds the JSON
lines of the runs that finished, and no summary line.
"""
from __future__ import annotations

import functools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.gap_forecaster import GapForecaster  # noqa: E402
from cache.session_infer import SessionInferrer  # noqa: E402
from cache.sim.cost_model import CALIBRATIONS, DEFAULT_CALIBRATION, CostModel  # noqa: E402
from cache.sim.oracle import OracleForecastSource  # noqa: E402
from cache.sim.replay import SimConfig, replay  # noqa: E402
from cache.sim.requests import SimRequest, to_sim_requests  # noqa: E402
from cache.sim.sweep import (ANCHORS, REACTIVE_AND_BOUNDS, gap_closed, lru_ttft_ratio, plot_policies,  # noqa: E402
                             plot_problem)
from cache.trace_format import read_trace_or_why  # noqa: E402
from benchmarks.policy_sources import cold_hmm_source, generator_model_source, hmm_source_factory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# beside the checkout (../shared/data, not in the repository): its first 5,606 requests of
# kvcache-ai/Mooncake's FAST25-release/traces/conversation_trace.jsonl (Apache-2.0)
MOONCAKE = ROOT.parent / "shared" / "data" / "mooncake_conversation_first_half.jsonl"
MOONCAKE_SOURCE = ("kvcache-ai/Mooncake's FAST25-release/traces/conversation_trace.jsonl (the requests with "
                   "timestamp < 1,768,499.5 ms)")
POLICIES = REACTIVE_AND_BOUNDS
MIN_MOONCAKE_REQUESTS = 2   # its first half ("train") and its second ("validation") each hold one
LONG_SESSIONS = 160  # per tenant, for the steady-state agent workload


def agent_requests(seed: int, num_tenants: int, num_sessions: int) -> list[SimRequest]:
    from agents_trace.workload.generator import WorkloadConfig, generate_workload
    from agents_trace.workload.tool_patterns import load_patterns

    config = WorkloadConfig(num_tenants=num_tenants, num_sessions=num_sessions, seed=seed)
    return to_sim_requests(generate_workload(config, load_patterns()), config.block_size)


def sessions_of(requests: list[SimRequest]) -> list[str]:
    """The session of each request as the replay names it (inferred where absent)."""
    inferrer = SessionInferrer()
    return [request.session or inferrer.session_of(request.tenant, request.hashes) for request in requests]


def run(requests, *, trace, split, hot, host, policy, block_size, measure_from=0, source=None, label=None,
        calibration=DEFAULT_CALIBRATION) -> dict:
    config = SimConfig(num_hot_blocks=hot, num_host_blocks=host, policy=policy, block_size=block_size,
                       cost=CostModel.for_block_size(block_size, calibration=calibration),
                       measure_from=measure_from)
    result = replay(requests, config, source=source).to_json()
    row = {"trace": trace, "split": split, "label": label or policy, **result}
    print(json.dumps(row), flush=True)
    return row


def summarize(rows: list[dict]) -> list[dict]:
    """Per (trace, split, hot, host): gap closed, TTFT ratio, whether Belady bounds."""
    groups: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        groups.setdefault((row["trace"], row["split"], row["hot_blocks"], row["host_blocks"]), {})[row["label"]] = row
    out = []
    for (trace, split, hot, host), by in groups.items():
        lru, bel = by["lru"], by["belady"]
        entry = {"trace": trace, "split": split, "hot_blocks": hot, "host_blocks": host,
                 "lru": lru["block_hit_rate"], "belady": bel["block_hit_rate"]}
        for label, row in by.items():
            if label in ("lru", "belady"):
                continue
            entry[label] = row["block_hit_rate"]
            entry[f"{label}_gap_closed"] = gap_closed(row, lru, bel)
            entry[f"{label}_ttft_ratio"] = lru_ttft_ratio(row, lru)
        anchors = [by[label] for label in ANCHORS if label in by]
        if anchors and "predictive" in by:
            best = min(anchors, key=lambda row: row["sim_ttft_mean_s"])
            entry["best_anchor"] = best["label"]
            for label, key in (("predictive", "best_anchor_ttft_ratio"), ("predictive+hmm", "best_anchor_ttft_ratio_hmm"),
                               ("predictive+hmm-cold", "best_anchor_ttft_ratio_hmm_cold")):
                if label in by:
                    entry[key] = round(best["sim_ttft_mean_s"] / by[label]["sim_ttft_mean_s"], 3)
        best_other = max(row["block_hit_rate"] for label, row in by.items() if label != "belady")
        entry["belady_is_bound"] = bel["block_hit_rate"] >= best_other
        if not entry["belady_is_bound"]:
            entry["note"] = ("Belady ranks blocks, not prefixes: a request's blocks are referenced while it "
                             "is served, so it cannot evict them, and a chain cut in the middle loses its tail")
        out.append(entry)
    return out


def plot(rows: list[dict], trace: str, split: str, path: Path, title: str) -> None:
    chosen = [row for row in rows if row["trace"] == trace and row["split"] == split and row["host_blocks"] == 0]
    plot_policies(chosen, path, title)


def plot_paths(out_dir: Path, quick: bool) -> dict[tuple[str, str], tuple[Path, str]]:
    """(trace, split) -> (image, title) of every plot this run draws."""
    paths = {("mooncake", "all"): (out_dir / "policies_mooncake.png",
                                   "Mooncake conversation trace (512-token blocks, HOT only)"),
             ("agent", "train"): (out_dir / "policies_agent.png",
                                  "Agent workload (4 tenants x 40 sessions, seed 0, 16-token blocks, HOT only)")}
    if not quick:
        paths["agent-long", "train"] = (
            out_dir / "policies_agent_long.png",
            f"Agent workload, steady state (4 tenants x {LONG_SESSIONS} sessions, seed 0, 16-token blocks)")
    return paths


def read_mooncake(path: Path) -> tuple[int, list[SimRequest]] | str:
    """The block size and requests of the Mooncake trace at `path`, or why it cannot be used."""
    if not path.exists() and path == MOONCAKE:
        return (f"{path} does not exist: the Mooncake trace is not in the repository; get {MOONCAKE_SOURCE} "
                "and pass it as --mooncake FILE")
    read = read_trace_or_why(path)
    if isinstance(read, str):
        return read
    header, records = read
    if len(records) < MIN_MOONCAKE_REQUESTS:
        return (f"{path} holds {len(records)} request{'' if len(records) == 1 else 's'}; the benchmark needs at "
                f"least {MIN_MOONCAKE_REQUESTS} (its first half is the train split, its second the validation)")
    return header.block_size, to_sim_requests(records, header.block_size)


def main(rows: list[dict]) -> int:
    """The whole benchmark; each run's row is appended to `rows` (the caller's list, so
    Ctrl+C still leaves the runs that finished) and printed as it finishes. Returns the
    exit status."""
    parser = benchmark_parser(__doc__)
    parser.add_argument("--mooncake", type=Path, default=MOONCAKE,
                        help="the Mooncake (or stepahead-trace/1) trace to replay (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and sessions (about a minute)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="where the PNG plots go (default: docs/ for a full run, which the docs show; a new "
                             "temporary directory for --quick, so a quick look never replaces them)")
    parser.add_argument("--calibration", choices=list(CALIBRATIONS), default=DEFAULT_CALIBRATION,
                        help="engine dtype whose measured costs the simulated TTFT uses (cache/sim/cost_model.py)")
    args = parser.parse_args()
    sim = functools.partial(run, calibration=args.calibration)
    started = time.perf_counter()
    mooncake = read_mooncake(args.mooncake)
    if isinstance(mooncake, str):
        print(f"error: {mooncake}", file=sys.stderr)
        return 2
    size, moon = mooncake
    out_dir = args.out_dir or (Path(tempfile.mkdtemp(prefix="bench_policies-quick-")) if args.quick
                               else ROOT / "docs")
    plots = plot_paths(out_dir, args.quick)
    for image, _ in plots.values():
        problem = plot_problem(image)
        if problem is not None:
            parser.error(f"argument --out-dir: {image}: {problem}")
    half = len(moon) // 2
    replay(moon[:200], SimConfig(num_hot_blocks=100, policy="predictive", block_size=size))  # warm-up
    capacities = (1000, 4000) if args.quick else (1000, 4000, 16000)
    splits = (("all", moon, 0), ("train", moon[:half], 0), ("validation", moon, half))
    for split, requests, measure_from in splits:
        configs = [(hot, 0) for hot in capacities] + ([] if args.quick else [(1000, 4000)])
        for hot, host in configs:
            anchors = ANCHORS if split == "all" else ()  # no tool calls: they match LRU (shown once)
            for policy in POLICIES + anchors:
                rows.append(sim(requests, trace="mooncake", split=split, hot=hot, host=host, policy=policy,
                                block_size=size, measure_from=measure_from))
    if not args.quick:
        sessions = sessions_of(moon)
        for hot in (1000, 4000):
            for mode in ("who", "exact"):
                source = OracleForecastSource(moon, sessions, mode, GapForecaster())
                rows.append(sim(moon, trace="mooncake", split="all", hot=hot, host=0, policy="predictive",
                                block_size=size, source=source, label=f"predictive[oracle:{mode}]"))

    hot_sizes = (1000, 2000) if args.quick else (500, 1000, 2000, 4000)
    for split, seed in (("train", 0), ("validation", 1)):
        requests = agent_requests(seed, num_tenants=4, num_sessions=40)
        hmm = None if args.quick else hmm_source_factory(4, seed)
        for hot, host in [(hot, 0) for hot in hot_sizes] + [(1000, 2000)]:
            for policy in POLICIES + ANCHORS:
                rows.append(sim(requests, trace="agent", split=split, hot=hot, host=host, policy=policy, block_size=16))
            if hmm is not None:
                rows.append(sim(requests, trace="agent", split=split, hot=hot, host=host, policy="predictive",
                                block_size=16, source=hmm(), label="predictive+hmm"))
                rows.append(sim(requests, trace="agent", split=split, hot=hot, host=host, policy="predictive",
                                block_size=16, source=cold_hmm_source(), label="predictive+hmm-cold"))
        if not args.quick:
            for hot in (1000, 2000):
                source = generator_model_source(seed, requests)
                rows.append(sim(requests, trace="agent", split=split, hot=hot, host=0, policy="predictive",
                                block_size=16, source=source, label="predictive[model]"))
        if split == "train" and not args.quick:
            sessions = sessions_of(requests)
            for hot in (1000, 2000):
                for mode in ("who", "exact"):
                    source = OracleForecastSource(requests, sessions, mode, GapForecaster())
                    rows.append(sim(requests, trace="agent", split=split, hot=hot, host=0, policy="predictive",
                                    block_size=16, source=source, label=f"predictive[oracle:{mode}]"))

    if not args.quick:
        for split, seed in (("train", 0), ("validation", 1)):
            requests = agent_requests(seed, num_tenants=4, num_sessions=LONG_SESSIONS)
            for hot in (1000, 2000, 4000, 8000):
                for policy in POLICIES + ANCHORS:
                    rows.append(sim(requests, trace="agent-long", split=split, hot=hot, host=0, policy=policy,
                                    block_size=16))
                rows.append(sim(requests, trace="agent-long", split=split, hot=hot, host=0, policy="predictive",
                                block_size=16, source=cold_hmm_source(), label="predictive+hmm-cold"))

    print(json.dumps({"summary": summarize(rows), "calibration": args.calibration, "plots": str(out_dir),
                      "wall_s": round(time.perf_counter() - started, 1)}), flush=True)
    try:   # after the summary line, which a plot that fails must not lose
        for (trace, split), (image, title) in plots.items():
            plot(rows, trace, split, image, title)
    except OSError as exc:
        print(f"error: cannot write the plots to {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (RuntimeError, ValueError) as exc:
        print(f"error: cannot draw the plots to {out_dir}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_policies: stopped while drawing the plots (the summary line is printed)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    finished: list[dict] = []
    try:
        sys.exit(main(finished))
    except KeyboardInterrupt:   # Ctrl+C: stdout keeps the finished runs' JSON lines, and only those
        print(f"bench_policies: stopped after {len(finished)} runs (their JSON lines are printed; "
              "no summary or plots)", file=sys.stderr)
        sys.exit(130)
