"""Diagnostic: what the HMM forecasts are worth when fed the stream the gateway sees.

The end-to-end replay sends token-id `/v1/completions` (no messages); without step hints
(`--no-step-hints`) the gateway's tracer observes every request as `USER` and every
response as a text answer: no tool names, no tool calls. This runs the same generated
trace through `cache.sim` with the predictive policy fed by the HMM predictor
(agents_trace.predict.cache_adapter) in three ways, beside LRU, the simulator's own gap
forecaster and Belady:

- rich/rich: pretrained on, and fed, the trace's tool names and tool calls (what a
  chat-completions agent with real tool messages gives the tracer, and what bench_e2e's
  step hints give it: its default);
- rich/gateway: pretrained on tool names, fed the stream without hints;
- gateway/gateway: both on the stream without hints (bench_e2e --no-step-hints).

    python benchmarks/e2e_forecast_stream.py --tenants 4 --sessions 40 --max-context 3000 --hot-blocks 500
Prints one JSON line (block hit rate, simulated TTFT mean/p99 per row); seconds.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from agents_trace.predict.cache_adapter import PredictorForecastSource  # noqa: E402
from agents_trace.predict.predictor import Predictor  # noqa: E402
from agents_trace.workload.generator import WorkloadConfig, generate_workload  # noqa: E402
from agents_trace.workload.sequences import session_sequences  # noqa: E402
from agents_trace.workload.tool_patterns import load_patterns  # noqa: E402
from cache.cli_args import positive_float, positive_int  # noqa: E402
from cache.sim.cost_model import CostModel  # noqa: E402
from cache.sim.replay import SimConfig, replay  # noqa: E402
from cache.sim.requests import to_sim_requests  # noqa: E402


class GatewayStream:
    """A forecast source seeing requests as the gateway does for a token-id replay."""

    def __init__(self, inner: PredictorForecastSource) -> None:
        self.inner = inner

    def observe(self, request) -> None:
        after = request.after if request.after in (None, "start") else "user"
        self.inner.observe(dataclasses.replace(request, after=after, tool_calls=()))

    def forecast(self, tenant: str, session: str, now_s: float):
        return self.inner.forecast(tenant, session, now_s)


def pretrained(records, as_seen_by_gateway: bool, speed: float = 1.0) -> Predictor:
    """A predictor fitted per tenant on the sessions of `records` (gaps / `speed`), on the
    symbol stream the gateway observes (`as_seen_by_gateway`) or on the tool names."""
    predictor = Predictor()
    streams = session_sequences(records, speed, as_seen_by_gateway=as_seen_by_gateway)
    for tenant, (sequences, gaps) in sorted(streams.items()):
        predictor.fit_sequences(tenant, sequences, gaps)
    return predictor


def training_and_replayed(args, seed: int) -> tuple[list, list]:
    """The workload of `seed` (args: tenants, sessions, session_rate, max_context) and the
    one to pretrain on: other sessions of the same tenants (seed + 1000, the same tools)."""
    def workload(workload_seed: int):
        return generate_workload(WorkloadConfig(
            num_tenants=args.tenants, num_sessions=args.sessions, seed=workload_seed, tool_seed=seed,
            session_rate_per_s=args.session_rate, max_context_tokens=args.max_context),
            load_patterns(None))

    return workload(seed + 1000), workload(seed)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_int, default=4, help="tenants of the generated workload")
    parser.add_argument("--sessions", type=positive_int, default=40, help="sessions per tenant")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the workload")
    parser.add_argument("--session-rate", type=positive_float, default=0.5,
                        help="new sessions a second, all tenants (default %(default)s)")
    parser.add_argument("--max-context", type=positive_int, default=3000, help="tokens a session's prompt may reach (default %(default)s)")
    parser.add_argument("--hot-blocks", type=positive_int, default=500, help="total, 16 tokens each")
    args = parser.parse_args()
    train, records = training_and_replayed(args, args.seed)
    requests = to_sim_requests(records, 16)
    rows = {"lru": ("lru", None), "belady": ("belady", None), "gap_forecaster": ("predictive", None),
            "hmm_rich_fed_rich": ("predictive", lambda: PredictorForecastSource(pretrained(train, False))),
            "hmm_rich_fed_gateway": ("predictive", lambda: GatewayStream(
                PredictorForecastSource(pretrained(train, False)))),
            "hmm_gateway_fed_gateway": ("predictive", lambda: GatewayStream(
                PredictorForecastSource(pretrained(train, True))))}
    out: dict = {"requests": len(requests), "hot_blocks": args.hot_blocks, "rows": {}}
    for name, (policy, source) in rows.items():
        config = SimConfig(num_hot_blocks=args.hot_blocks, policy=policy, block_size=16,
                           cost=CostModel.for_block_size(16))
        result = replay(requests, config, source() if source else None).to_json()
        out["rows"][name] = {k: result[k] for k in ("block_hit_rate", "sim_ttft_mean_s", "sim_ttft_p99_s")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
