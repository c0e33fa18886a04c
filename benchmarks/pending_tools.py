"""What telling the predictor which tools a response asked for does to its forecasts.

For each seed, a generated agent workload is replayed through the HMM predictor (through
its cache adapter, as `cache.sim` drives it) twice: told the tools each response asked
for (the predictor then forecasts that tool, unless abandoned, after its own duration)
and not told (the step model alone: the baseline). The predictor is pretrained on other
sessions of the same tenants (seed + 1000, the same tools), as bench_e2e does. Reported
per wait kind (after a tool call, after a text answer):

- `eta_log_error`: median |log(actual wait / forecast median ETA)|;
- calibration: mean forecast P(return within H) beside the fraction that returned within
  H, for H = 5, 15, 45 s. Only waits that ended in a return are scored (a session's last
  wait has no next arrival), so the returned fractions are conditional on returning
  and read as an upper bound for the forecast;
- the cache: the trace through `cache.sim` with the predictive policy fed by each source,
  beside LRU (block hit rate, LRU ÷ predictive mean simulated TTFT).

    python benchmarks/pending_tools.py                      # bench_e2e's workload
    python benchmarks/pending_tools.py --sessions 40 --session-rate 0.5 --hot-blocks 1000
Prints one JSON line; seconds.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from agents_trace.predict.cache_adapter import PredictorForecastSource  # noqa: E402
from cache.cli_args import ints, positive_float, positive_int  # noqa: E402
from benchmarks.e2e_forecast_stream import pretrained, training_and_replayed  # noqa: E402
from cache.forecast_source import RequestSeen  # noqa: E402
from cache.sim.cost_model import CostModel  # noqa: E402
from cache.sim.replay import SimConfig, replay  # noqa: E402
from cache.sim.requests import SimRequest, to_sim_requests  # noqa: E402

HORIZONS_S = (5.0, 15.0, 45.0)
MODES = {"told": True, "not_told": False}


def forecast_quality(requests: list[SimRequest], source: PredictorForecastSource) -> dict:
    """Each wait's forecast (made right after the request) against the session's next
    arrival, grouped by what the response was."""
    waiting: dict[tuple[str, str], tuple] = {}
    errors: dict[str, list[float]] = {"tool": [], "text": []}
    returned: dict[tuple[str, float], list[tuple[float, bool]]] = {}
    for request in requests:
        key = (request.tenant, request.session)
        if key in waiting:
            forecast, kind, since_s = waiting.pop(key)
            wait_s = max(request.t_s - since_s, 1e-3)
            eta_s = forecast.eta_s(0.5)
            if eta_s is not None:
                errors[kind].append(abs(math.log(wait_s / max(eta_s, 1e-3))))
            for horizon_s in HORIZONS_S:
                returned.setdefault((kind, horizon_s), []).append(
                    (forecast.p_return(horizon_s), wait_s <= horizon_s))
        source.observe(RequestSeen(request.tenant, request.session, request.t_s, request.after,
                                   request.tool_calls, request.num_blocks))
        forecast = source.forecast(request.tenant, request.session, request.t_s)
        waiting[key] = (forecast, "tool" if request.tool_calls else "text", request.t_s)
    out: dict = {}
    for kind, values in errors.items():
        out[f"{kind}_waits"] = len(values)
        out[f"{kind}_eta_log_error"] = round(statistics.median(values), 3) if values else None
    for (kind, horizon_s), pairs in sorted(returned.items()):
        out[f"{kind}_p_within_{horizon_s:g}s"] = round(statistics.fmean(p for p, _ in pairs), 3)
        out[f"{kind}_returned_within_{horizon_s:g}s"] = round(statistics.fmean(r for _, r in pairs), 3)
    return out


def run_seed(args, seed: int) -> dict:
    train, records = training_and_replayed(args, seed)
    requests = to_sim_requests(records, 16)

    def sim(policy: str, source=None) -> dict:
        config = SimConfig(num_hot_blocks=args.hot_blocks, policy=policy, block_size=16,
                           cost=CostModel.for_block_size(16))
        return replay(requests, config, source).to_json()

    lru = sim("lru")
    row: dict = {"seed": seed, "requests": len(requests), "lru_block_hit_rate": lru["block_hit_rate"]}
    for mode, told in MODES.items():
        quality = forecast_quality(requests, PredictorForecastSource(pretrained(train, False), tell_tool_calls=told))
        cached = sim("predictive", PredictorForecastSource(pretrained(train, False), tell_tool_calls=told))
        row[mode] = {**quality, "block_hit_rate": cached["block_hit_rate"],
                     "ttft_ratio": round(lru["sim_ttft_mean_s"] / cached["sim_ttft_mean_s"], 3)}
    return row


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_int, default=4, help="tenants of the generated workload")
    parser.add_argument("--sessions", type=positive_int, default=10, help="sessions per tenant")
    parser.add_argument("--seeds", type=ints, default=(0, 1, 2), help="comma-separated (default: 0,1,2)")
    parser.add_argument("--session-rate", type=positive_float, default=0.25,
                        help="new sessions a second, all tenants (default %(default)s)")
    parser.add_argument("--max-context", type=positive_int, default=3000, help="tokens a session's prompt may reach (default %(default)s)")
    parser.add_argument("--hot-blocks", type=positive_int, default=400, help="16 tokens each")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = [run_seed(args, seed) for seed in args.seeds]
    medians = {mode: {key: statistics.median(row[mode][key] for row in rows)
                      for key in ("tool_eta_log_error", "text_eta_log_error", "ttft_ratio")}
               for mode in MODES}
    print(json.dumps({"tenants": args.tenants, "sessions_per_tenant": args.sessions,
                      "session_rate_per_s": args.session_rate, "hot_blocks": args.hot_blocks,
                      "rows": rows, "medians": medians, "wall_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
