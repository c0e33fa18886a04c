"""End to end: predictive vs LRU vs no prefix caching, through the real gateway.

One run, one generated multi-tenant agent workload, three policies. For each policy the
script starts the gateway (uvicorn on 127.0.0.1, real worker processes, SmolLM2 by
default or the tiny model), replays the same workload with the replay harness (real tool
gaps scaled by --speed), and stops it. KV memory is set so the working set does not fit
(--hot-blocks per worker). `--policies` may add the anchors `ttl` (Continuum-style TTL
pins) and `kvflow` (KVFlow-style steps-to-execution eviction), which act on the same
forecasts the gateway sends every worker. The predictor starts from models fitted on a *different*
workload of the same tenants (other sessions, the same tools), as a restarted gateway
would restore them, fitted on the symbol stream the gateway sees for this replay: with the replay's step
hints (default) the trace's tool names, with --no-step-hints only USER / ASSISTANT_TEXT
(token-id completions show no tools); with --cold-start it starts with nothing learned, as
a new deployment does. The same trace also goes through `cache.sim` at the same
total KV memory (the headroom a forecast has, free of timing noise), and each run
records where the CPU went (gateway threads, workers: cpu_probe.py). Every replay runs
in a fresh process (a second replay in the same process ran measurably slower); with
--repeats N each policy is replayed N times in alternating order and the medians are
reported (per tenant, CPU and routing: the run with the median mean TTFT), with each
repeat's ratios under "runs" (e2e_runs.py).

Then the capacity figure (e2e_capacity.py): for --sweep-step, 2*step, ..--max-tenants
tenants at a fixed load per tenant, the largest tenant count whose p99 TTFT stays under
--slo-s, for predictive and for LRU.

    python benchmarks/bench_e2e.py                      # SmolLM2 (minutes)
    python benchmarks/bench_e2e.py --model tiny         # quick
Prints one JSON line; --plot writes NAME_ttft.png and NAME_capacity.png (--plot-name,
default e2e) into --out-dir (default: the repository's docs/, whose figures the docs
show; name another directory for a look that leaves the checkout alone). `--plot-from
JSON` draws a saved run's plots and runs nothing; a file that cannot be read or is not
this script's output is one error line (exit status 2), and so is an --out-dir where the
plots cannot be written, found before anything runs.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


from cache.cli_args import non_negative_int, positive_float, positive_int  # noqa: E402
from agents_trace.replay.report import build_report, late_send_warning  # noqa: E402
from benchmarks.bench_servers import InProcessGateway  # noqa: E402
from benchmarks.cpu_probe import CpuSample, delta  # noqa: E402
from benchmarks.e2e_saved_run import read_saved_run  # noqa: E402
from benchmarks.e2e_capacity import capacity_sweep, plot, plot_paths, simulate, sweep_counts  # noqa: E402
from benchmarks.e2e_runs import (failed_requests, median_run, median_totals, policy_orders, ratios,  # noqa: E402
                                 run_isolated)
from agents_trace.replay.runner import ReplayOptions, replay  # noqa: E402
from agents_trace.store_stats import StatsWindow, tenant_stats  # noqa: E402
from agents_trace.workload.generator import WorkloadConfig, generate_workload  # noqa: E402
from agents_trace.workload.tool_patterns import load_patterns  # noqa: E402
from cache.sim.sweep import plot_problem  # noqa: E402
from cache.trace_format import TraceHeader  # noqa: E402
from shards.model_loader import choose_dtype  # noqa: E402

POLICIES = ("predictive", "lru", "none")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def workload(args, num_tenants: int, seed: int, session_rate_per_s: float):
    """The replayed workload of `seed`; other seeds give other sessions of the same tenants
    (`tool_seed` is always --seed, so a tool takes as long in both)."""
    config = WorkloadConfig(num_tenants=num_tenants, num_sessions=args.sessions, seed=seed, tool_seed=args.seed,
                            session_rate_per_s=session_rate_per_s, max_context_tokens=args.max_context,
                            recorded_turns=not args.chain_turns)
    return config, generate_workload(config, load_patterns(None))


def pretrain_predictor(records, speed: float, directory: Path, *, step_hints: bool) -> None:
    """Fit per-tenant models on `records` as the gateway will observe the replay: tool
    names only when the replay sends step hints (see agents_trace.workload.sequences)."""
    from benchmarks.e2e_forecast_stream import pretrained

    predictor = pretrained(records, not step_hints, speed)
    try:
        predictor.save(directory)
    finally:
        predictor.close()


def gateway_config(args, policy: str, tenants: list[str]):
    from gateway.config import key_digest, parse_config

    engine = {"policy": "lru" if policy == "none" else policy, "num_hot_blocks": args.hot_blocks,
              "num_host_blocks": args.host_blocks, "threads_per_worker": args.threads_per_worker,
              "prefix_caching": policy != "none", "prefix_transfer": args.prefix_transfer,
              "decode_batch": args.decode_batch, "dtype": args.dtype, "prefill_order": args.prefill_order}
    return parse_config({
        "models": [{"name": "m", "kind": "local", "path": args.model, "num_workers": args.workers,
                    "engine": engine}],
        "tenants": [{"name": t, "api_key_sha256": [key_digest(f"sk-bench-{t}")]} for t in tenants],
    })


def run_policy(args, policy: str, records, header, predictor_seed_dir: Path) -> dict:
    from gateway.app import build_app

    tenants = sorted({r.tenant for r in records})
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["STEPAHEAD_PREDICTOR_DIR"] = str(Path(scratch) / "predictor")
        os.environ["STEPAHEAD_TRACE_DB"] = str(Path(scratch) / "traces.sqlite")
        shutil.copytree(predictor_seed_dir, os.environ["STEPAHEAD_PREDICTOR_DIR"])
        app = build_app(gateway_config(args, policy, tenants))
        with InProcessGateway(app) as gateway:
            options = ReplayOptions(
                base_url=gateway.base_url, api_key=f"sk-bench-{tenants[0]}",
                tenant_keys={t: f"sk-bench-{t}" for t in tenants}, model="m", speed=args.speed,
                concurrency=args.concurrency, max_input_tokens=args.max_context,
                max_output_tokens=args.max_output_tokens, vocab_size=args.vocab_size,
                progress=sys.stderr.isatty(), step_hints=args.step_hints)
            before = CpuSample.take(worker_pids(app))
            outcome = asyncio.run(replay(records, header, options))
            if outcome.gateway_stopped is not None:
                sys.exit(f"bench_e2e: the gateway stopped answering: {outcome.gateway_stopped}")
            if outcome.interrupted:
                raise KeyboardInterrupt  # a benchmark's partial run is not a result
            results, wall_s = outcome.results, outcome.wall_s
            cpu = delta(before, CpuSample.take(worker_pids(app)))
            cpu.update(forecast_counters(app))
            routing = app.state.gateway.backends["m"].engine.router_stats()
        stats = tenant_stats(Path(os.environ["STEPAHEAD_TRACE_DB"]), StatsWindow())["total"] or {}
    report = build_report(results, wall_s)
    # from the gateway's own traces: tokens a step's previous step left it that were evicted
    report["evicted_prefix"] = {key: stats.get(key) for key in (
        "prefix_from_previous_tokens", "evicted_prefix_tokens", "steps_with_evicted_prefix")}
    report["routing"] = {k: routing[k] for k in ("num_routed", "num_transfers", "num_transferred_blocks",
                                                    "num_session_moves")}
    report["policy"] = policy
    report["cpu"] = cpu
    return report


def worker_pids(app) -> list[int]:
    engine = app.state.gateway.backends["m"].engine
    pids = (engine.worker_pid(w) for w in engine.health()["workers"])
    return [pid for pid in pids if pid is not None]


def forecast_counters(app) -> dict:
    """How much forecasting work the gateway did (the relay runs for every policy)."""
    relay = app.state.gateway.forecasts
    if relay is None:
        return {}
    worker = relay.predictor._worker  # NOTE: a benchmark may read the counters
    return {"forecasts_forwarded": relay.num_forwarded, "forecasts_made": relay.num_forecasts,
            "gap_forecasts_sent": relay.num_gap_forecasts, "refits_done": worker.num_done}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="the workers' model: tiny, smollm2, or a model directory")
    parser.add_argument("--tenants", type=positive_int, default=3, help="tenants of the generated workload")
    parser.add_argument("--sessions", type=positive_int, default=4, help="sessions per tenant")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the workload")
    parser.add_argument("--speed", type=positive_float, default=4.0, help="tool/think time scale")
    parser.add_argument("--session-rate", type=positive_float, default=0.5,
                        help="new sessions per second, all --tenants together")
    parser.add_argument("--max-context", type=positive_int, default=3000,
                        help="tokens a session's prompt may reach")
    parser.add_argument("--max-output-tokens", type=positive_int, default=8, help="tokens each step generates")
    parser.add_argument("--workers", type=positive_int, default=2, help="worker processes of the gateway")
    parser.add_argument("--threads-per-worker", type=positive_int, default=1, help="torch threads of each worker")
    parser.add_argument("--hot-blocks", type=positive_int, default=300, help="per worker, 16 tokens each")
    parser.add_argument("--host-blocks", type=non_negative_int, default=0,
                        help="host tier blocks per worker (16 tokens each; 0: no host tier)")
    parser.add_argument("--concurrency", type=positive_int, default=32,
                        help="requests the replay keeps in flight at most")
    parser.add_argument("--vocab-size", type=positive_int, default=256, help="prompt token ids are drawn below this")
    parser.add_argument("--policies", default=",".join(POLICIES), help='"" to run only the sweep')
    parser.add_argument("--repeats", type=positive_int, default=1,
                        help="replays per policy, order alternating; figures are medians (e2e_runs.py)")
    parser.add_argument("--max-tenants", type=non_negative_int, default=0, help="capacity sweep up to N (0: skip)")
    parser.add_argument("--sweep-step", type=positive_int, default=1, help="tenant counts step, 2*step, ...")
    parser.add_argument("--sweep-start", type=non_negative_int, default=0,
                        help="first tenant count of the sweep (0: --sweep-step)")
    parser.add_argument("--sweep-repeats", type=positive_int, default=1,
                        help="replays per policy at each sweep point; the p99 is their median")
    parser.add_argument("--sweep-sessions", type=non_negative_int, default=0,
                        help="sessions per tenant in the sweep (0: --sessions)")
    parser.add_argument("--slo-s", type=positive_float, default=2.0, help="p99 TTFT SLO for the capacity sweep")
    parser.add_argument("--cold-start", action="store_true",
                        help="the predictor starts with nothing learned, as a new deployment does "
                             "(default: fitted on other sessions of the same tenants)")
    parser.add_argument("--no-step-hints", dest="step_hints", action="store_false",
                        help="replay without stepahead_replay hints: the gateway sees no tools")
    parser.add_argument("--no-prefix-transfer", dest="prefix_transfer", action="store_false",
                        help="workers never copy a shared prefix from each other (recompute instead)")
    parser.add_argument("--prefill-order", choices=("deadline", "arrival"), default="deadline",
                        help="which admitted prefill runs next (shards/prefill_order.py)")
    parser.add_argument("--decode-batch", type=positive_int, default=16,
                        help="running requests a worker decodes per forward pass (1: one at a time)")
    parser.add_argument("--dtype", default="auto",
                        help="workers' weights and KV cache (auto: bfloat16 where the CPU computes it natively)")
    parser.add_argument("--plot", action="store_true",
                        help="draw NAME_ttft.png and NAME_capacity.png into --out-dir")
    parser.add_argument("--plot-name", default="e2e", help="NAME of the plots' files")
    parser.add_argument("--plot-from", type=Path, metavar="JSON",
                        help="only draw the plots of a saved run (this script's output, or its JSON object), "
                             "run nothing")
    parser.add_argument("--out-dir", type=Path, default=DOCS,
                        help="where --plot and --plot-from write (default: the repository's docs/, whose figures "
                             "the docs show)")
    parser.add_argument("--chain-turns", action="store_true",
                        help="the workload before session 11: sessions end by the tool chain's odds alone, "
                             "not after a recorded number of user turns")
    args = parser.parse_args()
    if args.plot or args.plot_from is not None:
        for image in plot_paths(args.out_dir, args.plot_name):
            if (problem := plot_problem(image)) is not None:
                parser.error(f"argument --out-dir: {image}: {problem}")
    if args.plot_from is not None:
        saved = read_saved_run(args.plot_from)
        if isinstance(saved, str):
            parser.error(f"argument --plot-from: {saved}")
        try:
            plot(saved, args.out_dir, args.plot_name)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:   # policies there, the rest not
            parser.error(f"argument --plot-from: {args.plot_from} is not bench_e2e.py's output "
                         f"({type(exc).__name__}: {exc})")
        return

    num_trained = max(args.tenants, args.max_tenants)
    _, train = workload(args, num_trained, args.seed + 1000, args.session_rate)
    seed_dir = Path(tempfile.mkdtemp(prefix="stepahead-bench-predictor-"))
    if not args.cold_start:
        pretrain_predictor(train, args.speed, seed_dir, step_hints=args.step_hints)
    config, records = workload(args, args.tenants, args.seed, args.session_rate)
    header = TraceHeader(block_size=config.block_size)
    out: dict = {"model": args.model, "dtype": choose_dtype(args.dtype, args.model, "cpu"),
                 "requests": len(records), "tenants": args.tenants,
                 "sessions_per_tenant": args.sessions, "session_rate_per_s": args.session_rate,
                 "hot_blocks_per_worker": args.hot_blocks, "host_blocks_per_worker": args.host_blocks,
                 "workers": args.workers, "speed": args.speed, "step_hints": args.step_hints,
                 "cold_start": args.cold_start,
                 "prefix_transfer": args.prefix_transfer, "prefill_order": args.prefill_order,
                 "recorded_turns": not args.chain_turns,
                 "simulator": simulate(records, config.block_size, args.hot_blocks * args.workers, args.workers),
                 "policies": {}}
    print(json.dumps({"simulator": out["simulator"]}), file=sys.stderr, flush=True)
    policies = [p for p in args.policies.split(",") if p]  # "": the sweep only
    reports: dict[str, list[dict]] = {p: [] for p in policies}
    out["runs"] = []
    for repeat, order in enumerate(policy_orders(policies, args.repeats) if policies else []):
        totals = {}
        for policy in order:
            try:
                report = run_isolated(run_policy, args, policy, records, header, seed_dir)
            except RuntimeError as exc:   # the child's error (a stopped gateway, say), as one line
                sys.exit(f"bench_e2e: the {policy} run: {exc}")
            failed_requests(policy, report["total"], report["error_samples"])
            if (late := late_send_warning(report)) is not None:   # the replay's own lag hides latency
                print(f"bench_e2e: the {policy} run: {late}", file=sys.stderr)
            reports[policy].append(report)
            totals[policy] = report["total"]
            print(json.dumps({"progress": policy, "repeat": repeat, **report["total"], "cpu": report["cpu"],
                              "evicted_prefix": report["evicted_prefix"], "error_samples": report["error_samples"]}),
                  file=sys.stderr, flush=True)
        out["runs"].append({"order": order, **ratios(totals)})
    for policy, runs in reports.items():
        middle = median_run(runs)
        out["policies"][policy] = {"total": median_totals([r["total"] for r in runs]),
                                   "per_tenant": middle["per_tenant"], "wall_s": middle["wall_s"],
                                   "cpu": middle["cpu"], "routing": middle["routing"],
                                   "evicted_prefix": median_totals([r["evicted_prefix"] for r in runs]),
                                   "error_samples": sorted({e for r in runs for e in r["error_samples"]})[:10]}
    out.update(ratios({p: v["total"] for p, v in out["policies"].items()}))
    if len(out["runs"]) > 1:  # paired: each repeat's ratio, then the median over repeats
        out["median_of_run_ratios"] = median_totals([{k: v for k, v in run.items() if k != "order"}
                                                     for run in out["runs"]])
    if args.max_tenants:
        per_tenant_rate = args.session_rate / args.tenants
        sweep_args = argparse.Namespace(**{**vars(args),
                                           "sessions": args.sweep_sessions or args.sessions})
        out["capacity"] = capacity_sweep(
            sweep_counts(args.max_tenants, args.sweep_step, args.sweep_start), args.slo_s,
            lambda n: workload(sweep_args, n, args.seed, per_tenant_rate * n),
            lambda policy, recs, head: run_isolated(run_policy, sweep_args, policy, recs, head, seed_dir),
            repeats=args.sweep_repeats)
        out["capacity"].update(sessions_per_tenant=sweep_args.sessions,
                               session_rate_per_tenant_s=per_tenant_rate)
    shutil.rmtree(seed_dir, ignore_errors=True)
    print(json.dumps(out))
    if args.plot:
        plot(out, args.out_dir, args.plot_name)


if __name__ == "__main__":
    main()
