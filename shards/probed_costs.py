"""Costs that workers probed at an earlier start on this machine, kept for the next start.

A worker's cost probe (`shards.kv_transfer.measure_costs`: three timed prefills and a
block copy each way) takes about 2.4 s of a SmolLM2 worker's start on a 2-core machine,
and gives the same answer again when nothing about the workers or the machine changed.
So a start whose `ProbeKey` matches one stored less than `MAX_AGE_S` ago reuses those
costs instead of probing; the engine refines them from live requests either way.

Invariants: a lookup never raises (a missing, unreadable or damaged file is a miss);
a store never raises either (a start does not fail for it), writes the whole file
atomically (a reader sees the old file or the new one), and keeps at most `MAX_ENTRIES`
keys, the most recently stored.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from cache.atomic_file import replacing
from shards.model_files import TINY_MODEL, model_cache_dir, model_dir
from shards.protocol import CostProfile
from shards.worker_config import WorkerConfig

MAX_AGE_S = 24 * 3600.0
MAX_ENTRIES = 64
FILE_NAME = "probed_costs.json"

log = logging.getLogger("stepahead.shards")


def probed_costs_path() -> Path:
    """Beside the converted models, in the user cache directory (STEPAHEAD_CACHE_DIR)."""
    return model_cache_dir().parent / FILE_NAME


@dataclass(frozen=True, slots=True)
class ProbeKey:
    """Everything a probe's answer depends on: the workers' model (its name, and when its
    files last changed) and how they run it, how many probe at once (they share the
    cores), and the machine and torch."""

    model: str
    model_files_changed_ns: int
    device: str
    dtype: str
    num_workers: int
    num_threads: int
    block_size: int
    prefill_chunk_tokens: int
    inline_transfers: bool
    processor: str
    torch_version: str

    @classmethod
    def of(cls, config: WorkerConfig, num_workers: int) -> ProbeKey:
        """The key of `num_workers` workers started with `config` (its dtype settled)."""
        processor, torch_version = this_machine()
        return cls(model=config.model, model_files_changed_ns=model_files_changed_ns(config.model),
                   device=config.device, dtype=config.dtype, num_workers=num_workers,
                   num_threads=config.num_threads, block_size=config.block_size,
                   prefill_chunk_tokens=config.prefill_chunk_tokens, inline_transfers=config.inline_transfers,
                   processor=processor, torch_version=torch_version)

    def text(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def worker_ids(self) -> set[str]:
        return {f"w{i}" for i in range(self.num_workers)}


def model_files_changed_ns(model: str) -> int:
    """When the files of `model`'s directory last changed (the newest modification time
    of its top-level files, in ns): another model put at the same path is another key.
    0 for 'tiny' (built from code) and for a directory not there (yet)."""
    if model == TINY_MODEL:
        return 0
    try:
        return max((entry.stat().st_mtime_ns for entry in model_dir(model).iterdir() if entry.is_file()), default=0)
    except OSError:
        return 0


def this_machine() -> tuple[str, str]:
    """(processor model, torch version), read without importing torch."""
    processor = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "unknown"
    return processor, torch_version


class ProbedCosts:
    """The stored probes in one JSON file at `path`:
    {key text: {"stored_s": wall time, "workers": {worker id: CostProfile fields}}}."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else probed_costs_path()

    def get(self, key: ProbeKey, now_s: float) -> dict[str, CostProfile] | None:
        """The costs each of the key's workers probed under `key` within MAX_AGE_S of
        `now_s`, or None (also when one of them is missing)."""
        entry = self._read().get(key.text())
        try:
            if not 0 <= now_s - float(entry["stored_s"]) <= MAX_AGE_S:
                return None
            costs = {worker: CostProfile(**fields) for worker, fields in entry["workers"].items()}
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
        return costs if key.worker_ids() <= set(costs) else None

    def put(self, key: ProbeKey, costs: dict[str, CostProfile], now_s: float) -> None:
        """Store `costs` (worker id -> its probe) under `key`, stamped `now_s`."""
        entries = self._read()
        entries.pop(key.text(), None)
        entries[key.text()] = {"stored_s": now_s,
                               "workers": {worker: dataclasses.asdict(c) for worker, c in costs.items()}}
        newest = sorted(entries.items(), key=lambda item: _stamp(item[1]))[-MAX_ENTRIES:]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(self.path, shared=True) as stream:   # the cache directory: others may read it
                stream.write(json.dumps(dict(newest), indent=1))
        except OSError as exc:
            log.warning("stepahead: warning: could not store the probed worker costs in %s: %s", self.path, exc)

    def _read(self) -> dict:
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}


def _stamp(entry) -> float:
    try:
        return float(entry["stored_s"])
    except (TypeError, KeyError, ValueError):
        return float("-inf")
