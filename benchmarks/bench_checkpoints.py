"""Forecaster checkpoints with many tenants: writing every tenant (what each checkpoint
did before, and what a save into a new directory still does) against writing only the
tenants that changed since the last save (`Predictor.save`).

    python benchmarks/bench_checkpoints.py [--tenants 1000] [--fitted-share 0.1] [--changed-share 0.01]

Builds a predictor of --tenants tenants, --fitted-share of them with a fitted step model
(12 learned sessions) and the rest with 3 sessions, then per repeat: a full save into a
fresh directory (every tenant written), then --changed-share of the tenants take a step,
then a save into the same directory. Prints one JSON line: median seconds of each, the
tenants each wrote, and full ÷ incremental.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents_trace.predict import persist  # noqa: E402
from agents_trace.predict.config import PredictorConfig  # noqa: E402
from agents_trace.predict.predictor import Predictor  # noqa: E402

TOOLS = ("search", "read_file", "write_file", "run_tests", "browse")


def build(num_tenants: int, fitted_share: float, seed: int) -> Predictor:
    rng = random.Random(seed)
    predictor = Predictor(PredictorConfig(background_refits=False))
    num_fitted = round(num_tenants * fitted_share)
    for i in range(num_tenants):
        sessions = [[rng.choice(TOOLS) for _ in range(rng.randint(2, 8))]
                    for _ in range(12 if i < num_fitted else 3)]
        predictor.fit_sequences(f"tenant-{i}", sessions)
    return predictor


def timed_save(predictor: Predictor, directory: Path) -> tuple[float, int]:
    """Seconds `predictor.save(directory)` took, and the files it wrote."""
    written = []
    real = persist.write

    def counting(directory, stem, meta, arrays):
        written.append(stem)
        real(directory, stem, meta, arrays)

    persist.write = counting
    try:
        began = time.perf_counter()
        predictor.save(directory)
        return time.perf_counter() - began, len(written)
    finally:
        persist.write = real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--fitted-share", type=float, default=0.1)
    parser.add_argument("--changed-share", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    began = time.monotonic()
    predictor = build(args.tenants, args.fitted_share, args.seed)
    rng = random.Random(args.seed + 1)
    full, incremental = [], []
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as root:
        for repeat in range(args.repeats):
            directory = Path(root) / f"r{repeat}"
            full.append(timed_save(predictor, directory))
            changed = rng.sample(range(args.tenants), max(1, round(args.tenants * args.changed_share)))
            for i in changed:
                predictor.observe(f"tenant-{i}", f"s{repeat}", rng.choice(TOOLS), 100.0 + repeat, gap_s=1.0)
            incremental.append(timed_save(predictor, directory))
    predictor.close()
    full_s = statistics.median(s for s, _ in full)
    incremental_s = statistics.median(s for s, _ in incremental)
    print(json.dumps({
        "benchmark": "checkpoints", "tenants": args.tenants, "fitted_share": args.fitted_share,
        "changed_share": args.changed_share, "repeats": args.repeats, "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - began, 1),
        "full": {"save_s_median": round(full_s, 4), "files_written": full[0][1]},
        "incremental": {"save_s_median": round(incremental_s, 4), "files_written": incremental[0][1]},
        "ratios": {"full_over_incremental_save_s": round(full_s / incremental_s, 1) if incremental_s > 0 else None}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
