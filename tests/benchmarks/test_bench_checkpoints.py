"""benchmarks/bench_checkpoints.py end to end on a few tenants: the full save writes
every tenant and the global model, the incremental one only the tenants that stepped."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_checkpoints.py"


def test_a_small_run_reports_both_saves_and_what_each_wrote():
    done = subprocess.run([sys.executable, str(SCRIPT), "--tenants", "40", "--changed-share", "0.1",
                           "--repeats", "2"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["full"]["files_written"] == 41        # every tenant and the global model
    assert result["incremental"]["files_written"] == 4  # the 10 % that took a step
    assert result["full"]["save_s_median"] > 0 and result["incremental"]["save_s_median"] > 0
    assert result["ratios"]["full_over_incremental_save_s"] > 0
