"""calibrate_sim: the line fit (known answers), and one real run on the tiny model."""
from __future__ import annotations

import json

import pytest

from benchmarks.calibrate_sim import fit_line
from tests.benchmarks.in_process import run_benchmark


def test_fit_line_known_answers():
    assert fit_line([(100, 0.15), (200, 0.25), (400, 0.45)]) == pytest.approx((0.05, 0.001))
    # a negative intercept is clipped: the slope is refitted through the origin
    assert fit_line([(100, 0.05), (200, 0.2)]) == pytest.approx((0.0, 0.45 / 500))
    with pytest.raises(ValueError):
        fit_line([(100, 0.1), (100, 0.2)])


def test_calibrate_sim_prints_flags_the_simulator_accepts(tmp_path):
    # lengths far apart and medians of 3: a busy machine's noise (ms on the tiny model) must
    # not make the longer prompt look cheaper (one repeat of 64 and 256 tokens once did); one
    # torch thread, as the other test process computes on the other core (at two, CI timed
    # 64 tokens at 17 ms and 1,024 at 9 ms)
    out = run_benchmark("calibrate_sim", "--model", "tiny", "--lengths", "64,1024", "--repeats", "3", "--threads", "1")
    row = json.loads(out.strip().splitlines()[-1])
    assert row["dtype"] == "float32" and [n for n, _ in row["points"]] == [64, 1024]
    assert row["prefill_s_per_token"] > 0 and row["request_overhead_s"] >= 0
    assert row["kv_bytes_per_token"] > 0 and row["kv_bytes_per_token"] % 4 == 0  # float32 elements
    from cache.sim.cli import build_parser
    parsed = build_parser().parse_args(["--trace", "x", "--hot-blocks", "1", *row["sim_flags"].split()])
    assert (parsed.prefill_s_per_token, parsed.request_overhead_s, parsed.kv_bytes_per_token) == (
        row["prefill_s_per_token"], row["request_overhead_s"], row["kv_bytes_per_token"])
