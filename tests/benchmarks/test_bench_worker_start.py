"""benchmarks/bench_worker_start.py in parts (the whole script starts four gateways and
two engines: a minute on the tiny model): the configs it serves, the restarts it times,
and the summary it prints."""
from __future__ import annotations

import asyncio

import pytest

from benchmarks.bench_worker_start import gateway_config, summarize, time_restarts
from gateway.config import load_config


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_each_gateway_is_told_its_start_method(tmp_path, method):
    gateway_config(tmp_path / "g.toml", "tiny", 3, method)
    [model] = load_config(tmp_path / "g.toml").models
    assert model.num_workers == 3 and model.path == "tiny"
    assert dict(model.engine_options)["transport_options"] == {"start_method": method}


def test_the_memory_of_a_process_tree_counts_its_children():
    import os
    import subprocess
    import sys

    from benchmarks.bench_worker_start import process_tree, tree_pss_mib

    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"   # measured once it runs: just forked, it may hold no pages yet
        assert child.pid in process_tree(os.getpid())
        alone = tree_pss_mib(child.pid)
        assert alone is not None and 0 < alone < tree_pss_mib(os.getpid())
        assert 0 < tree_pss_mib(os.getpid(), tree=False) < tree_pss_mib(os.getpid())
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_restarts_are_timed_from_the_kill_until_the_next_incarnation_serves():
    waits = asyncio.run(time_restarts("tiny", 1, "forkserver", 2))
    assert len(waits) == 2 and all(0 < wait < 120 for wait in waits)


def test_the_summary_takes_medians_and_divides_spawn_by_the_fork_server():
    gateways = {"forkserver": [{"start_s": 8.0, "stop_s": 2.0, "pss_mib": 900.0, "main_pss_mib": 300.0},
                               {"start_s": 10.0, "stop_s": 2.0, "pss_mib": None, "main_pss_mib": None},
                               {"start_s": 9.0, "stop_s": 1.0, "pss_mib": 1000.0, "main_pss_mib": 320.0}],
                "spawn": [{"start_s": 12.0, "stop_s": 3.0, "pss_mib": None, "main_pss_mib": None},
                          {"start_s": 13.5, "stop_s": 4.0, "pss_mib": None, "main_pss_mib": None},
                          {"start_s": 12.5, "stop_s": 3.0, "pss_mib": None, "main_pss_mib": None}]}
    summary = summarize(gateways, {"forkserver": [0.5, 0.4, 0.6], "spawn": [5.0, 6.0, 7.0]})
    assert summary["forkserver"]["gateway_start_s_median"] == 9.0
    assert summary["spawn"]["worker_restart_s_median"] == 6.0
    assert summary["forkserver"]["gateway_pss_mib_median"] == 950.0   # of the known ones
    assert summary["spawn"]["gateway_pss_mib_median"] is None
    assert summary["forkserver"]["gateway_main_pss_mib_median"] == 310.0
    assert summary["ratios"] == {"spawn_over_forkserver_gateway_start_s": 1.39,
                                 "spawn_over_forkserver_gateway_stop_s": 1.5,
                                 "spawn_over_forkserver_worker_restart_s": 12.0}
