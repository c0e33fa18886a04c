"""Whether a process still runs, judged as the kernel sees it (torch-free, no psutil)."""
from __future__ import annotations

import os
from pathlib import Path


def process_runs(pid: int) -> bool:
    """Whether process `pid` exists and has not exited. A zombie not yet reaped has
    exited: a killed child whose parent is gone may stay one, and signalling it still
    succeeds, so /proc's state is read where there is one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False
        try:   # no /proc here
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:   # it runs, as another user
            return True
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
