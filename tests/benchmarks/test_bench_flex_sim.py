"""benchmarks/bench_flex_sim.py, small: the agents alone, beside a batch with flex first,
and beside it in the old order, side by side."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_flex_sim.py"


def test_flex_first_keeps_more_of_the_agents_cache_than_the_old_order():
    done = subprocess.run([sys.executable, str(BENCH), "--sessions", "8", "--hot-blocks", "400", "--policies", "lru",
                           "--batch-per-s", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    [row] = out["summary"]
    assert out["batch_requests"] > 0
    rates = {case: row[case]["agents_block_hit_rate"] for case in ("alone", "flex_first", "old_order")}
    assert rates["alone"] >= rates["flex_first"] > rates["old_order"]
    assert row["old_order_over_flex_first_ttft"] > 1
