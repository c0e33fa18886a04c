"""benchmarks/bench_trace_store.py: the contender's ids come from SessionTable and sort by
time, the baseline's do not; a short run writes every session and reports both sides."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_trace_store import StoreUnderTest, random_id, stitched_id_maker

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trace_store.py"


def test_the_two_stores_differ_only_in_their_ids(tmp_path):
    ordered = StoreUnderTest(tmp_path / "o.sqlite3", stitched_id_maker())
    shuffled = StoreUnderTest(tmp_path / "r.sqlite3", random_id)
    for store in (ordered, shuffled):
        assert store.write(300, 13) > 0
        store.store.close()
    ids = {}
    for name in ("o", "r"):
        with sqlite3.connect(tmp_path / f"{name}.sqlite3") as db:
            ids[name] = [row[0] for row in db.execute("SELECT session FROM steps ORDER BY arrived_s")]
            assert db.execute("SELECT COUNT(*), SUM(num_steps) FROM sessions").fetchone() == (300, 300)
    assert len(set(ids["o"])) == 300 and ids["o"] == sorted(ids["o"])   # creation order = key order
    assert len(set(ids["r"])) == 300 and ids["r"] != sorted(ids["r"])


def test_a_short_run_reports_both_sides_and_their_ratio():
    done = subprocess.run([sys.executable, str(SCRIPT), "--sessions", "500", "--measure", "100", "--rounds", "2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for side in ("random", "ordered"):
        assert len(result[side]["write_us_per_step_rounds"]) == 2 and result[side]["store_mb"] > 0
        assert result[side]["write_us_per_step_median"] > 0
    assert result["random_over_ordered"] == round(result["random"]["write_us_per_step_median"]
                                                   / result["ordered"]["write_us_per_step_median"], 2)
    bad = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rounds" in bad.stderr
