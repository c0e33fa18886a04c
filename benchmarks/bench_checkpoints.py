"""Forecaster checkpoints with many tenants: writing every tenant (what each checkpoint
did before, and what a save into a new directory still does) against writing only the
tenants that changed since the last save (`Predictor.save`; for the gap forecaster
`cache.gap_files.GapFiles`, against the one `_gaps.json` every checkpoint rewrote before).

    python benchmarks/bench_checkpoints.py [--tenants 1000] [--fitted-share 0.1] [--changed-share 0.01]

Builds a predictor of --tenants tenants, --fitted-share of them with a fitted step model
(12 learned sessions) and the rest with 3 sessions, then per repeat: a full save into a
fresh directory (every tenant written), then --changed-share of the tenants take a step,
then a save into the same directory. The same for a gap forecaster fed 4 sessions of
each tenant (`bench_gap_recount.built`): per repeat the one-file save (its copy of every statistic is what held the
relay's lock), then --changed-share of the tenants' sessions return, then the
per-tenant save (copy of the changed tenants under the lock, file checks and writes
outside it). Prints one JSON line: median seconds of each, the tenants each wrote, the
seconds the copy held the lock, and full ÷ incremental.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_int  # noqa: E402
from agents_trace.predict import persist  # noqa: E402
from bench_gap_recount import TOOLS, built as build_gaps  # noqa: E402
from cache.forecast_source import RequestSeen  # noqa: E402
from cache.gap_files import GapFiles  # noqa: E402
from cache.gap_forecaster import GapForecaster  # noqa: E402
from cache.gap_memory import write_gaps  # noqa: E402
from agents_trace.predict.config import PredictorConfig  # noqa: E402
from agents_trace.predict.predictor import Predictor  # noqa: E402



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


def timed_gap_saves(gaps: GapForecaster, directory: Path, files: GapFiles | None) -> tuple[float, float, int]:
    """(seconds of the whole save, seconds of the copy the relay makes under its lock,
    tenants written): one `_gaps.json` of everything when `files` is None."""
    began = time.perf_counter()
    if files is None:
        learned = gaps.learned()
        copied_s = time.perf_counter() - began
        write_gaps(learned, directory / "_gaps.json")
        return time.perf_counter() - began, copied_s, len(learned.steps)
    marks = gaps.change_marks()
    stale = files.stale(marks)
    copy_began = time.perf_counter()
    learned = gaps.learned(stale)
    copied_s = time.perf_counter() - copy_began
    written = files.write(learned, {t: marks[t] for t in stale})
    return time.perf_counter() - began, copied_s, written


def bench_gaps(num_tenants: int, changed_share: float, repeats: int, seed: int, root: Path) -> dict:
    gaps, now_s = build_gaps(num_tenants, seed)
    rng = random.Random(seed + 2)
    files = GapFiles(root / "gaps")
    timed_gap_saves(gaps, root, files)   # the first save into a directory writes every tenant
    one_file, per_tenant = [], []
    for repeat in range(repeats):
        one_file.append(timed_gap_saves(gaps, root, None))
        now_s += 60.0
        for i in rng.sample(range(num_tenants), max(1, round(num_tenants * changed_share))):
            for dt in (0.0, 2.0):   # a session's step and its return
                gaps.observe(RequestSeen(f"tenant-{i}", f"r{repeat}", now_s + dt, tool_calls=("search",), num_blocks=8))
        per_tenant.append(timed_gap_saves(gaps, root, files))
    size = (root / "_gaps.json").stat().st_size
    result = {}
    for name, runs in (("one_file", one_file), ("per_tenant", per_tenant)):
        result[name] = {"save_s_median": round(statistics.median(r[0] for r in runs), 4),
                        "lock_s_median": round(statistics.median(r[1] for r in runs), 4),
                        "tenants_written": runs[0][2]}
    result["one_file"]["bytes"] = size
    result["ratios"] = {key: round(result["one_file"][f"{key}_median"] / result["per_tenant"][f"{key}_median"], 1)
                        for key in ("save_s", "lock_s") if result["per_tenant"][f"{key}_median"] > 0}
    return result


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_int, default=1000, help="tenants the predictor has seen")
    parser.add_argument("--fitted-share", type=non_negative_float, default=0.1,
                        help="fraction of the tenants with a fitted model (0 to 1)")
    parser.add_argument("--changed-share", type=non_negative_float, default=0.01,
                        help="fraction of the tenants changed between two saves (0 to 1; at least one tenant)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed saves of each way; the figures are their medians")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the tenants' data")
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
    with tempfile.TemporaryDirectory(prefix="bench-gap-checkpoints-") as root:
        gap_result = bench_gaps(args.tenants, args.changed_share, args.repeats, args.seed, Path(root))
    full_s = statistics.median(s for s, _ in full)
    incremental_s = statistics.median(s for s, _ in incremental)
    print(json.dumps({
        "benchmark": "checkpoints", "tenants": args.tenants, "fitted_share": args.fitted_share,
        "changed_share": args.changed_share, "repeats": args.repeats, "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - began, 1),
        "full": {"save_s_median": round(full_s, 4), "files_written": full[0][1]},
        "incremental": {"save_s_median": round(incremental_s, 4), "files_written": incremental[0][1]},
        "ratios": {"full_over_incremental_save_s": round(full_s / incremental_s, 1) if incremental_s > 0 else None},
        "gap_forecaster": gap_result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
