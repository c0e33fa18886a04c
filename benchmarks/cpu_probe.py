"""CPU time per thread of this process and per child process, from /proc (Linux).

For the end-to-end benchmark: where did the CPU go during one policy's replay — the
gateway's event loop, the trace writer (tracer, predictor observe + forecast), the
predictor's refit thread, the replay client, or the model workers.

`CpuSample` is a snapshot; `delta(before, after)` is seconds of CPU (user + system) per
thread name and per pid between them, and for the whole machine (/proc/stat): busy
seconds of all processes, the part spent by processes other than this one and the
workers ("others": a test run, a noisy job), and the seconds the hypervisor gave our
virtual CPUs to someone else ("steal"). Those two are what tells a run slowed by its
neighbours from a run slowed by its own work. A thread that started after `before` counts from
zero; one that ended before `after` is lost (snapshot before threads stop). Threads of
the same name are summed. On a system without /proc every snapshot is empty.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field

if __name__ == "__main__":
    print("error: cpu_probe.py is a helper module, not a benchmark: "
          "it is used by bench_e2e.py and bench_gateway_cpu.py; run one of those", file=sys.stderr)
    sys.exit(2)

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


def _machine_cpu_s() -> tuple[float, float]:
    """(busy, steal) seconds of all CPUs since boot from /proc/stat's first line;
    busy = user + nice + system + irq + softirq; (0, 0) without /proc."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    fields += [0] * (8 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / _TICKS_PER_S, steal / _TICKS_PER_S


def _thread_names() -> dict[int, str]:
    """Native thread id -> Python thread name (the OS name is "python" for all of them
    before Python 3.14); threads Python does not know (torch, BLAS) are "native"."""
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds by (thread id, thread name) of this process and by child pid."""

    threads: dict[tuple[int, str], float] = field(default_factory=dict)
    processes: dict[int, float] = field(default_factory=dict)
    machine_busy_s: float = 0.0
    machine_steal_s: float = 0.0

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
        busy, steal = _machine_cpu_s()
        return cls(threads, processes, busy, steal)


def delta(before: CpuSample, after: CpuSample) -> dict:
    """{"threads": {name: s}, "gateway_process_s": s, "workers_s": s, "others_s": s,
    "steal_s": s} between samples; others_s = the machine's busy time less this process
    and the workers (never below 0: the counters are read at slightly different moments)."""
    by_name: dict[str, float] = defaultdict(float)
    for key, cpu in after.threads.items():
        by_name[key[1]] += cpu - before.threads.get(key, 0.0)
    workers = sum(cpu - before.processes.get(pid, 0.0) for pid, cpu in after.processes.items())
    gateway = sum(by_name.values())
    others = after.machine_busy_s - before.machine_busy_s - gateway - workers
    return {"threads": {name: round(s, 2) for name, s in sorted(by_name.items()) if s > 0},
            "gateway_process_s": round(gateway, 2),
            "workers_s": round(workers, 2),
            "others_s": round(max(0.0, others), 2),
            "steal_s": round(after.machine_steal_s - before.machine_steal_s, 2)}

