"""benchmarks/bench_gc_pauses.py end to end, one short round: both gateways serve, the
setting takes effect (objects frozen or none), and every figure is reported."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_gc_pauses import gateway_config, ratio
from gateway.config import load_config

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gc_pauses.py"


def test_configs_differ_only_in_the_setting(tmp_path):
    for freeze in (True, False):
        gateway_config(tmp_path / "g.toml", "http://127.0.0.1:1", freeze, tmp_path / "t.sqlite3")
        config = load_config(tmp_path / "g.toml")
        assert config.freeze_startup_heap is freeze and config.tracing.store_path == str(tmp_path / "t.sqlite3")
        assert config.is_admin("bench") and config.models[0].passthrough
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, 0.0) is None and ratio(1.0, -2.0) is None


def test_one_short_round_reports_both_gateways():
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "2", "--requests", "48", "--concurrency", "4"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    frozen, defaults = result["frozen"], result["defaults"]
    assert frozen["frozen_objects"] > 10_000 and defaults["frozen_objects"] == 0
    for side in (frozen, defaults):
        assert len(side["rounds"]) == 2 and side["full_collections_in_loads"] >= 0
        assert side["overhead_p99_ms_worst"] == max(r["overhead_p99_ms"] for r in side["rounds"])
    assert set(result["ratios"]) == {"defaults_over_frozen_worst_p99", "defaults_over_frozen_full_collection_pause",
                                     "defaults_over_frozen_longest_full_collection"}
