"""The forecast sources bench_policies.py replays its agent workloads with, beside the
built-in gap forecaster: the HMM predictor warmed on each tenant's history, the same from
nothing (a new gateway's cold start), and the generator's own distributions (the
information limit; a diagnostic)."""
from __future__ import annotations

import random
import sys

if __name__ == "__main__":   # before the imports below, which need the repository on sys.path
    print("error: policy_sources.py is a helper module, not a benchmark: "
          "it is used by bench_policies.py; run one of those", file=sys.stderr)
    sys.exit(2)

from cache.forecast_source import FallbackSource, ForecastSource  # noqa: E402
from cache.gap_forecaster import GapForecaster  # noqa: E402
from cache.sim.requests import SimRequest  # noqa: E402

SESSION_IDLE_TIMEOUT_S = 900.0  # the gateway's default ([tracing] session_idle_timeout_s)


def hmm_source_factory(num_tenants: int, seed: int):
    """A factory of predictor-backed sources warmed on each tenant's own history (sessions
    sampled from its domain's patterns with another seed), or None without the package.
    As in the gateway, the gap forecaster speaks where the predictor is not confident
    (with 200 sessions a tenant, never on these traces)."""
    try:
        from agents_trace.predict.cache_adapter import PredictorForecastSource
        from agents_trace.predict.config import PredictorConfig
        from agents_trace.predict.predictor import Predictor
        from agents_trace.workload.tool_patterns import load_patterns
    except ImportError:
        return None
    patterns = load_patterns()

    def make() -> ForecastSource:
        predictor = Predictor(PredictorConfig(background_refits=False))
        rng = random.Random(seed + 1000)
        for i in range(num_tenants):
            history = [patterns[i % len(patterns)].sample_session(rng) for _ in range(200)]
            predictor.fit_sequences(f"tenant{i}", history)
        gaps = GapForecaster()
        return FallbackSource(PredictorForecastSource(predictor, on_end=gaps.forget), gaps)

    return make


def cold_hmm_source() -> ForecastSource:
    """The HMM predictor with nothing learned, as a new gateway starts: a session ends
    (and is learned) once idle for the gateway's timeout, and its tenant is refitted
    when due, as the gateway's background refits would; until a forecast of it is
    confident, the gap forecaster's is used where that one is (gateway/forecasting.py)."""
    from agents_trace.predict.cache_adapter import PredictorForecastSource
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor

    gaps = GapForecaster()
    return FallbackSource(PredictorForecastSource(Predictor(PredictorConfig(background_refits=False)),
                                                  end_after_s=SESSION_IDLE_TIMEOUT_S, refit_when_due=True,
                                                  on_end=gaps.forget),
                          gaps)


def generator_model_source(seed: int, requests: list[SimRequest]) -> ForecastSource:
    """Forecasts from the generator's own distributions: the information limit."""
    from agents_trace.workload.generator import WorkloadConfig
    from agents_trace.workload.tool_patterns import load_patterns
    from benchmarks.model_oracle import GeneratorModelSource

    config = WorkloadConfig(num_tenants=4, num_sessions=40, seed=seed)
    return GeneratorModelSource(config, load_patterns(), [request.num_output_tokens for request in requests])

