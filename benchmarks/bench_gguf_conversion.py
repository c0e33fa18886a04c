"""The embedded model's first-start conversion (GGUF -> safetensors), as transformers does
it alone and with the file read once (`shards/gguf_read_once.py`), in one run.

Each conversion runs in a fresh interpreter of its own (imports included, as a first
start's child process pays them) into a fresh cache directory; the two ways alternate
over --repeats (baseline first, then contender first). The files each writes are
compared byte for byte. Prints one JSON line: medians, `speedup` = baseline ÷ contender,
and `identical`.

    python benchmarks/bench_gguf_conversion.py [--repeats 2]
"""
from __future__ import annotations

import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONVERT = """
import contextlib, sys
import shards.model_loader as loader
if sys.argv[1] == "baseline":   # transformers alone: the memo made a no-op
    loader.gguf_read_once = contextlib.nullcontext
loader.load_model_files("smollm2")
"""
FILES = ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json")


def convert(way: str, cache_dir: Path) -> float:
    env = {**os.environ, "STEPAHEAD_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", CONVERT, way], env=env, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="timed conversions of each way; the figures are their medians")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "contender": []}
    identical = True
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            ways = ("baseline", "contender") if repeat % 2 == 0 else ("contender", "baseline")
            dirs = {}
            for way in ways:
                dirs[way] = Path(work) / f"{way}{repeat}"
                times[way].append(convert(way, dirs[way]))
            written = [dirs[way] / "models" / "smollm2-135m-instruct" for way in ways]
            identical &= all(filecmp.cmp(written[0] / name, written[1] / name, shallow=False) for name in FILES)
    baseline, contender = statistics.median(times["baseline"]), statistics.median(times["contender"])
    print(json.dumps({"repeats": args.repeats, "baseline_s": round(baseline, 2), "contender_s": round(contender, 2),
                      "speedup": round(baseline / contender, 2), "identical": identical,
                      "each_s": {way: [round(t, 2) for t in ts] for way, ts in times.items()}}))


if __name__ == "__main__":
    main()
