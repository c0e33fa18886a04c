"""bench_policies' summary: gap closed, TTFT ratios and the best anchor, by hand; and the
anchors told a generated agent workload's tool calls."""
import pytest

from benchmarks.bench_policies import agent_requests, summarize
from cache.sim.replay import SimConfig, replay


def row(label: str, hits: float, ttft_s: float) -> dict:
    return {"trace": "agent", "split": "train", "hot_blocks": 100, "host_blocks": 0, "label": label,
            "block_hit_rate": hits, "sim_ttft_mean_s": ttft_s}


def test_summary_names_the_best_anchor_and_ratios() -> None:
    rows = [row("lru", 0.4, 2.0), row("predictive", 0.6, 1.25), row("belady", 0.8, 1.0),
            row("ttl", 0.5, 1.6), row("kvflow", 0.45, 1.8), row("predictive+hmm", 0.65, 1.0),
            row("predictive+hmm-cold", 0.55, 2.0)]
    (entry,) = summarize(rows)
    assert entry["predictive_gap_closed"] == 0.5 and entry["ttl_gap_closed"] == 0.25
    assert entry["predictive_ttft_ratio"] == 1.6 and entry["kvflow_ttft_ratio"] == pytest.approx(1.111)
    assert (entry["best_anchor"], entry["best_anchor_ttft_ratio"]) == ("ttl", 1.28)
    assert entry["best_anchor_ttft_ratio_hmm"] == 1.6 and entry["best_anchor_ttft_ratio_hmm_cold"] == 0.8
    assert entry["belady_is_bound"]


def test_anchors_act_on_an_agent_workloads_tool_calls_and_belady_bounds_them() -> None:
    """Told the tool calls, both anchors keep other blocks than LRU (they act on what
    they are told; better or worse depends on the workload, see docs/benchmarks.md),
    and Belady is at or above all three in block hits."""
    requests = agent_requests(0, num_tenants=2, num_sessions=8)
    results = {policy: replay(requests, SimConfig(num_hot_blocks=300, policy=policy, block_size=16))
               for policy in ("lru", "ttl", "kvflow", "belady")}
    hits = {policy: result.to_json()["block_hit_rate"] for policy, result in results.items()}
    for anchor in ("ttl", "kvflow"):
        assert results[anchor].num_evictions != results["lru"].num_evictions or hits[anchor] != hits["lru"], anchor
    assert hits["belady"] >= max(hits["lru"], hits["ttl"], hits["kvflow"]), hits


def test_ctrl_c_stops_the_benchmark_quietly_leaving_the_finished_runs_json_lines(tmp_path) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_policies.py"
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 1024, "output_length": 4,
                                            "hash_ids": [i % 3, 10 + i]}) + "\n" for i in range(20)))
    bench = subprocess.Popen([sys.executable, str(script), "--quick", "--mooncake", str(mooncake),
                              "--out-dir", str(tmp_path / "plots")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = bench.stdout.readline()   # a run finished
        assert json.loads(first)["trace"] == "mooncake"
        time.sleep(0.2)
        bench.send_signal(signal.SIGINT)
        bench.wait(timeout=60)
        rest, stderr = bench.stdout.read(), bench.stderr.read()   # read past what readline buffered
    finally:
        bench.kill()
    assert bench.returncode == 130 and "Traceback" not in stderr, stderr[-2000:]
    lines = (first + rest).splitlines()
    assert all("trace" in json.loads(line) for line in lines)   # runs only, every line whole JSON
    assert f"bench_policies: stopped after {len(lines)} runs" in stderr


def _mooncake(path, num_requests: int) -> str:
    import json

    path.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 1024, "output_length": 4,
                                        "hash_ids": [i % 3, 10 + i]}) + "\n" for i in range(num_requests)))
    return str(path)


@pytest.mark.parametrize("case, message", [
    ("missing", "error: cannot read {dir}/missing.jsonl: No such file or directory"),
    ("dir", "error: cannot read {dir}: Is a directory"),
    ("garbage", "error: cannot read {dir}/garbage.jsonl: line 1: not JSON"),
    ("header-only", "error: {dir}/header.jsonl holds 0 requests; the benchmark needs at least 2"),
    ("out-dir", "bench_policies.py: error: argument --out-dir: /proc/stepahead-no/policies_mooncake.png: "
                "cannot write there"),
])
def test_bad_inputs_are_one_error_line_and_exit_2_before_any_run(tmp_path, case, message) -> None:
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "garbage.jsonl").write_text("{not json\n")
    (tmp_path / "header.jsonl").write_text('{"format": "stepahead-trace/1", "block_size": 512}\n')
    mooncake = {"missing": tmp_path / "missing.jsonl", "dir": tmp_path, "garbage": tmp_path / "garbage.jsonl",
                "header-only": tmp_path / "header.jsonl"}.get(case) or _mooncake(tmp_path / "m.jsonl", 4)
    out_dir = "/proc/stepahead-no" if case == "out-dir" else str(tmp_path / "plots")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_policies.py"
    done = subprocess.run([sys.executable, str(script), "--quick", "--mooncake", str(mooncake), "--out-dir", out_dir],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith(message.format(dir=tmp_path)), done.stderr


def test_the_summary_is_printed_before_the_plots_and_survives_a_plot_that_fails(tmp_path, monkeypatch,
                                                                                 capsys) -> None:
    """A tiny run (4 Mooncake requests, an agent workload of 2 tenants x 2 sessions) whose
    plot cannot be written: the summary line is out, then one error line, exit status 2."""
    import json
    import sys

    import benchmarks.bench_policies as bench

    def unwritable(runs, path, title):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(bench, "agent_requests", lambda seed, num_tenants, num_sessions: agent_requests(seed, 2, 2))
    monkeypatch.setattr(bench, "plot_policies", unwritable)
    monkeypatch.setattr(sys, "argv", ["bench_policies.py", "--quick", "--mooncake", _mooncake(tmp_path / "m.jsonl", 4),
                                      "--out-dir", str(tmp_path / "plots")])
    rows: list[dict] = []
    assert bench.main(rows) == 2
    captured = capsys.readouterr()
    summary = json.loads(captured.out.splitlines()[-1])
    assert len(captured.out.splitlines()) == len(rows) + 1 and summary["plots"] == str(tmp_path / "plots")
    plotted = {("mooncake", "all"), ("agent", "train")}
    assert {(entry["trace"], entry["split"]) for entry in summary["summary"]} >= plotted
    assert captured.err == f"error: cannot write the plots to {tmp_path / 'plots'}: Permission denied\n"


def test_a_missing_default_mooncake_trace_says_where_to_get_it(monkeypatch, tmp_path):
    """QA148: the default was an absolute /work/shared/data path, and a clone without the
    data got only "cannot read": the default is ../shared/data beside the checkout, and
    its absence names the trace's source and --mooncake."""
    import benchmarks.bench_policies as bench
    assert bench.MOONCAKE == bench.ROOT.parent / "shared" / "data" / "mooncake_conversation_first_half.jsonl"
    missing = tmp_path / "mooncake.jsonl"
    monkeypatch.setattr(bench, "MOONCAKE", missing)
    why = bench.read_mooncake(missing)
    assert isinstance(why, str) and "not in the repository" in why and "--mooncake FILE" in why
    assert "kvcache-ai/Mooncake" in why
