"""Worker costs probed at one start and reused by the next with the same key."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os

from shards.engine import LocalEngine
from shards.local_transport import LocalTransport
from shards.probed_costs import MAX_AGE_S, MAX_ENTRIES, ProbedCosts, ProbeKey
from shards.protocol import CostProfile
from shards.worker_config import WorkerConfig

COSTS = {"w0": CostProfile(1e-3, 2e-4, 3e-4), "w1": CostProfile(1.1e-3, 2.2e-4, 3.3e-4)}


def key(**changes) -> ProbeKey:
    return dataclasses.replace(ProbeKey.of(WorkerConfig(model="tiny", dtype="float32"), 2), **changes)


def test_a_stored_probe_is_found_under_its_key_within_its_age(tmp_path):
    store = ProbedCosts(tmp_path / "costs.json")
    store.put(key(), COSTS, now_s=1000.0)
    assert store.get(key(), now_s=1000.0 + MAX_AGE_S - 1) == COSTS
    assert store.get(key(num_workers=3), now_s=1001.0) is None           # a worker without its probe
    assert store.get(key(dtype="bfloat16"), now_s=1001.0) is None        # another key
    assert store.get(key(processor="another CPU"), now_s=1001.0) is None
    assert store.get(key(), now_s=1000.0 + MAX_AGE_S + 1) is None        # too old
    assert store.get(key(), now_s=999.0) is None                         # stored "in the future"
    assert store.get(key(num_workers=1), now_s=1001.0) is None           # stored for 2 workers, not 1


def test_another_model_at_the_same_path_is_another_key(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    os.utime(model / "config.json", ns=(1_000_000_000, 1_000_000_000))
    first = ProbeKey.of(WorkerConfig(model=str(model), dtype="float32"), 1)
    assert first.model_files_changed_ns == 1_000_000_000
    assert ProbeKey.of(WorkerConfig(model=str(model), dtype="float32"), 1) == first
    (model / "model.safetensors").write_bytes(b"new weights")
    assert ProbeKey.of(WorkerConfig(model=str(model), dtype="float32"), 1) != first
    assert ProbeKey.of(WorkerConfig(model=str(tmp_path / "missing"), dtype="float32"), 1).model_files_changed_ns == 0
    assert ProbeKey.of(WorkerConfig(model="tiny", dtype="float32"), 1).model_files_changed_ns == 0


def test_a_probe_of_fewer_workers_is_not_taken_for_more(tmp_path):
    store = ProbedCosts(tmp_path / "costs.json")
    store.put(key(num_workers=2), {"w0": COSTS["w0"]}, now_s=5.0)
    assert store.get(key(num_workers=2), now_s=6.0) is None


def test_a_damaged_or_missing_file_is_a_miss_and_a_failed_store_does_not_raise(tmp_path):
    path = tmp_path / "costs.json"
    assert ProbedCosts(path).get(key(), 1.0) is None
    for damaged in ("{not json", "[1, 2]", json.dumps({key().text(): {"stored_s": 1.0, "workers": {"w0": {"x": 1}}}})):
        path.write_text(damaged)
        assert ProbedCosts(path).get(key(), 2.0) is None
    blocked = tmp_path / "a file" / "costs.json"
    (tmp_path / "a file").write_text("not a directory")
    ProbedCosts(blocked).put(key(), COSTS, 3.0)   # logged, not raised
    assert ProbedCosts(blocked).get(key(), 3.0) is None


def test_a_failed_store_is_a_warning_line_as_the_others_are(tmp_path, caplog):
    """It lacked the `stepahead: warning:` prefix that every other such line has."""
    (tmp_path / "a file").write_text("not a directory")
    blocked = tmp_path / "a file" / "costs.json"
    ProbedCosts(blocked).put(key(), COSTS, 3.0)
    [message] = caplog.messages
    assert message.startswith(f"stepahead: warning: could not store the probed worker costs in {blocked}: ")


def test_the_file_keeps_the_most_recently_stored_keys(tmp_path):
    store = ProbedCosts(tmp_path / "costs.json")
    for i in range(MAX_ENTRIES + 5):
        store.put(key(num_threads=i + 1), COSTS, now_s=100.0 + i)
    kept = json.loads((tmp_path / "costs.json").read_text())
    assert len(kept) == MAX_ENTRIES
    assert store.get(key(num_threads=1), 200.0) is None
    assert store.get(key(num_threads=MAX_ENTRIES + 5), 200.0) == COSTS


def test_an_engine_probes_at_its_first_start_and_reuses_the_probe_at_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path))
    asked_to_probe: list[bool] = []
    spawn = LocalTransport.spawn

    def recording_spawn(self, worker_id, incarnation, config, on_message, on_exit):
        asked_to_probe.append(config.measure_costs)
        return spawn(self, worker_id, incarnation, config, on_message, on_exit)

    monkeypatch.setattr(LocalTransport, "spawn", recording_spawn)

    told: list[str] = []

    def start_and_stop(**options) -> tuple[str, dict]:
        eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=32, threads_per_worker=1, **options)
        eng.on_start_progress = told.append

        async def run():
            await eng.start()
            try:
                return eng.health()["cost_probe"], dict(eng._probed_costs)
            finally:
                await eng.stop()

        return asyncio.run(run())

    first, probed = start_and_stop()
    assert (first, asked_to_probe) == ("probed", [True]) and set(probed) == {"w0"}
    again, reused = start_and_stop()
    assert (again, asked_to_probe[1:]) == ("reused", [False]) and reused == probed
    assert start_and_stop(reuse_probed_costs=False)[0] == "probed" and asked_to_probe[2:] == [True]
    # each start said what its workers do first, the timing where they do it and why: the
    # third found the second's timing stored, and times them only because it was told to
    timing = "starting 1 worker(s): loading the model, then timing each one's prefill and decode"
    assert told == [f"{timing} (no timing of this machine with these settings from the last 24 h)",
                    "starting 1 worker(s): loading the model", f"{timing} (reuse_probed_costs = false)"]
