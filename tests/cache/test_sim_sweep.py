"""Several simulator runs side by side: known-answer ratios, and a sweep from the command
line equal to the same runs made one at a time."""
from __future__ import annotations

import json

import pytest

from cache.sim.cli import main
from cache.sim.sweep import comparison_rows, comparison_table
from cache.trace_format import TraceHeader, write_trace

from tests.cache.test_sim import random_records


def _run(label, hot, hit, ttft, host=0):
    return {"label": label, "hot_blocks": hot, "host_blocks": host, "block_hit_rate": hit,
            "token_hit_rate": hit, "sim_ttft_mean_s": ttft, "sim_ttft_p99_s": 2 * ttft}


def test_ratios_and_gap_closed_compare_runs_of_the_same_memory_only():
    runs = [_run("predictive", 100, 0.5, 0.8), _run("belady", 100, 0.6, 0.5), _run("lru", 100, 0.4, 1.0),
            _run("kvflow", 100, 0.45, 0.9), _run("lru", 200, 0.7, 0.4), _run("predictive", 200, 0.7, 0.5),
            _run("predictive", 100, 0.55, 0.7, host=50)]
    rows = comparison_rows(runs)
    assert [(r["hot_blocks"], r["host_blocks"], r["label"]) for r in rows] == [
        (100, 0, "lru"), (100, 0, "predictive"), (100, 0, "belady"), (100, 0, "kvflow"),
        (100, 50, "predictive"), (200, 0, "lru"), (200, 0, "predictive")]
    by = {(r["hot_blocks"], r["host_blocks"], r["label"]): r for r in rows}
    assert by[100, 0, "predictive"]["lru_ttft_ratio"] == 1.25 and by[100, 0, "predictive"]["gap_closed"] == 0.5
    assert by[100, 0, "belady"]["gap_closed"] == 1.0 and by[100, 0, "lru"]["gap_closed"] == 0.0
    assert by[100, 0, "kvflow"]["gap_closed"] == 0.25
    assert by[100, 50, "predictive"]["lru_ttft_ratio"] is None   # no LRU run with that HOST tier
    assert by[200, 0, "predictive"]["lru_ttft_ratio"] == 0.8 and by[200, 0, "predictive"]["gap_closed"] is None
    table = comparison_table(rows).splitlines()
    assert table[1].split() == ["100", "0", "lru", "0.4000", "0.4000", "1.0000", "2.0000", "1.000x", "0.00"]
    assert table[5] == "" and table[7] == "" and len(table) == 10   # a blank line between memory sizes


def test_a_sweep_equals_its_runs_made_alone_and_draws_the_plot(tmp_path, capsys):
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=4, num_requests=300, block_size=4), TraceHeader(block_size=4))
    plot = tmp_path / "plots" / "sweep.png"
    assert main(["--trace", str(path), "--hot-blocks", "12,24", "--policy", "lru,predictive,belady", "--json",
                 "--plot", str(plot)]) == 0
    swept = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["hot_blocks"], r["label"]) for r in swept] == [
        (12, "lru"), (12, "predictive"), (12, "belady"), (24, "lru"), (24, "predictive"), (24, "belady")]
    for run in swept:
        assert main(["--trace", str(path), "--hot-blocks", str(run["hot_blocks"]), "--policy", run["label"]]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert {k: alone[k] for k in ("block_hit_rate", "evictions", "sim_ttft_mean_s")} == \
            {k: run[k] for k in ("block_hit_rate", "evictions", "sim_ttft_mean_s")}
    assert plot.stat().st_size > 10_000
    assert main(["--trace", str(path), "--hot-blocks", "12", "--policy", "all"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in table[1:]] == ["lru", "predictive", "belady", "kvflow", "ttl"]


@pytest.mark.parametrize("flag, value, message", [("--policy", "lru,fifo", "unknown policy 'fifo'"),
                                                  ("--hot-blocks", "8,0", "must be > 0"),
                                                  ("--hot-blocks", "8,x", "comma-separated list")])
def test_a_bad_list_is_a_usage_error_naming_it(tmp_path, capsys, flag, value, message):
    args = {"--trace": str(tmp_path / "t.jsonl"), "--hot-blocks": "8", flag: value}
    with pytest.raises(SystemExit) as exit_info:
        main([part for pair in args.items() for part in pair])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_ctrl_c_in_a_sweep_prints_the_finished_runs_and_exits_130(tmp_path, capsys, monkeypatch):
    import cache.sim.cli as cli

    path = tmp_path / "t.jsonl"
    with open(path, "w") as stream:
        write_trace(stream, random_records(seed=3, num_requests=40), TraceHeader(block_size=4))
    real_replay, calls = cli.replay, []

    def interrupted_on_the_third(requests, config):
        calls.append(config.policy)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_replay(requests, config)

    def stopped(*flags: str) -> int:
        try:
            return main(["--trace", str(path), "--hot-blocks", "8,16", "--policy", "lru,belady", *flags])
        except KeyboardInterrupt:
            pytest.fail("Ctrl+C left the simulator as a KeyboardInterrupt traceback")

    monkeypatch.setattr(cli, "replay", interrupted_on_the_third)
    assert stopped() == 130
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[-1] == "python -m cache.sim: stopped after 2 of 4 runs"
    table = out.strip().splitlines()
    assert table[0].split()[:3] == ["hot", "host", "policy"] and [row.split()[2] for row in table[1:]] == [
        "lru", "belady"]
    calls.clear()
    assert stopped("--json") == 130
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(line)["label"] for line in lines] == ["lru", "belady"]   # each finished run's line only


def test_a_gap_closed_that_rounds_to_zero_prints_0_00_not_minus_0_00():
    runs = [_run("lru", 100, 0.4, 1.0), _run("ttl", 100, 0.3999, 1.0), _run("belady", 100, 0.6, 0.5)]
    rows = comparison_rows(runs)
    assert [row["gap_closed"] for row in rows] == [0.0, 1.0, -0.001]   # lru, belady, ttl
    assert comparison_table(rows).splitlines()[3].split()[-1] == "0.00"
