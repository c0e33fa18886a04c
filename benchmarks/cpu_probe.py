"""CPU time per thread of this process and per child process, from /proc (Linux).

For the end-to-end benchmark: where did the CPU go during one policy's replay — the
gateway's event loop, the trace writer (tracer, predictor observe + forecast), the
predictor's refit thread, the replay client, or the model workers.

`CpuSample` is a snapshot; `delta(before, after)` is seconds of CPU (user + system) per
thread name and per pid between them. A thread that started after `before` counts from
zero; one that ended before `after` is lost (snapshot before threads stop). Threads of
the same name are summed. On a system without /proc every snapshot is empty.
"""
from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_cpu_s(path: str) -> float | None:
    """utime + stime of a /proc/.../stat file, in seconds; None when it is gone."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    # NOTE: the command name (field 2) may contain spaces; fields after ')' are fixed.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def _thread_names() -> dict[int, str]:
    """Native thread id -> Python thread name (the OS name is "python" for all of them
    before Python 3.14); threads Python does not know (torch, BLAS) are "native"."""
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds by (thread id, thread name) of this process and by child pid."""

    threads: dict[tuple[int, str], float] = field(default_factory=dict)
    processes: dict[int, float] = field(default_factory=dict)

    @classmethod
    def take(cls, pids: list[int] = ()) -> "CpuSample":
        threads: dict[tuple[int, str], float] = {}
        task_dir = "/proc/self/task"
        names = _thread_names()
        if os.path.isdir(task_dir):
            for tid in os.listdir(task_dir):
                cpu = _stat_cpu_s(f"{task_dir}/{tid}/stat")
                if cpu is not None:
                    threads[(int(tid), names.get(int(tid), "native"))] = cpu
        processes = {}
        for pid in pids:
            cpu = _stat_cpu_s(f"/proc/{pid}/stat")
            if cpu is not None:
                processes[pid] = cpu
        return cls(threads, processes)


def delta(before: CpuSample, after: CpuSample) -> dict:
    """{"threads": {name: s}, "gateway_process_s": s, "workers_s": s} between samples."""
    by_name: dict[str, float] = defaultdict(float)
    for key, cpu in after.threads.items():
        by_name[key[1]] += cpu - before.threads.get(key, 0.0)
    workers = sum(cpu - before.processes.get(pid, 0.0) for pid, cpu in after.processes.items())
    return {"threads": {name: round(s, 2) for name, s in sorted(by_name.items()) if s > 0},
            "gateway_process_s": round(sum(by_name.values()), 2),
            "workers_s": round(workers, 2)}
