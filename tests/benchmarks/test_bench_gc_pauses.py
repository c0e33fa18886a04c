"""benchmarks/bench_gc_pauses.py end to end, one short round: both gateways serve, the
setting takes effect (objects frozen or none), and every figure is reported."""
from __future__ import annotations

import json

from benchmarks.bench_gc_pauses import gateway_config, ratio
from gateway.config import load_config
from tests.benchmarks.in_process import run_benchmark


def test_configs_differ_only_in_the_setting(tmp_path):
    for freeze in (True, False):
        gateway_config(tmp_path / "g.toml", "http://127.0.0.1:1", freeze, tmp_path / "t.sqlite3")
        config = load_config(tmp_path / "g.toml")
        assert config.freeze_startup_heap is freeze and config.tracing.store_path == str(tmp_path / "t.sqlite3")
        assert config.is_admin("bench") and config.models[0].passthrough
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, 0.0) is None and ratio(1.0, -2.0) is None


def test_one_short_round_reports_both_gateways():
    # the upstream answers in 2 ms, not 20: the loads' figures are reported, not judged
    out = run_benchmark("bench_gc_pauses", "--rounds", "2", "--requests", "16", "--concurrency", "4",
                        "--latency-ms", "2")
    result = json.loads(out.strip().splitlines()[-1])
    frozen, defaults = result["frozen"], result["defaults"]
    assert frozen["frozen_objects"] > 10_000 and defaults["frozen_objects"] == 0
    for side in (frozen, defaults):
        assert len(side["rounds"]) == 2 and side["full_collections_in_loads"] >= 0
        assert side["overhead_p99_ms_worst"] == max(r["overhead_p99_ms"] for r in side["rounds"])
    assert result["ratios"] == {   # each from both gateways' figures (null where the frozen one's is 0 or below)
        "defaults_over_frozen_worst_p99": ratio(defaults["overhead_p99_ms_worst"], frozen["overhead_p99_ms_worst"]),
        "defaults_over_frozen_full_collection_pause": ratio(defaults["full_collection_pause_ms_in_loads"],
                                                            frozen["full_collection_pause_ms_in_loads"]),
        "defaults_over_frozen_longest_full_collection": ratio(defaults["longest_full_collection_ms"],
                                                              frozen["longest_full_collection_ms"])}
