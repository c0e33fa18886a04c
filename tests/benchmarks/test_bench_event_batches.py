"""benchmarks/bench_event_batches.py: a short run streams every token to each stream on
both engines (the script checks each stream's count and end) and reports both sides."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_event_batches.py"


def test_a_short_run_reports_both_sides_and_their_ratio():
    done = subprocess.run([sys.executable, str(SCRIPT), "--streams", "3", "--tokens", "40", "--rounds", "2"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["streams"], result["tokens"], result["rounds"]) == (3, 40, 2)
    for side in ("one_by_one", "batched"):
        assert result[side]["cpu_us_per_token"] > 0 and result[side]["tokens_per_s"] > 0
    ratio = result["one_by_one"]["cpu_us_per_token"] / result["batched"]["cpu_us_per_token"]
    assert abs(result["one_by_one_over_batched"] - ratio) <= 0.01 * ratio + 0.01
