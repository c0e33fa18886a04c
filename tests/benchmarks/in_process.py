"""Run a benchmark script's `main` inside the test process and return what it printed.

The scripts' own work is what the tests check; run as a child each one would import torch
and transformers again (about 9 s here) and start a fork server of its own, where this
process has both already. `main` reads its flags from `sys.argv`, as from the command line.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import sys


def run_benchmark(module: str, *args: str) -> str:
    """stdout of `python benchmarks/<module>.py ARGS`, run in this process; a non-zero exit
    (a `SystemExit` with a message or code) fails the calling test with that message."""
    main = importlib.import_module(f"benchmarks.{module}").main
    printed = io.StringIO()
    saved_argv = sys.argv
    sys.argv = [f"benchmarks/{module}.py", *args]
    torch = sys.modules.get("torch")   # a script may set a worker's one thread: this process keeps its own
    threads = torch.get_num_threads() if torch is not None else None
    try:
        with contextlib.redirect_stdout(printed):
            main()
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise AssertionError(f"benchmarks/{module}.py exited: {exit_.code}\n{printed.getvalue()[-2000:]}")
    finally:
        sys.argv = saved_argv
        if threads is not None:
            torch.set_num_threads(threads)
    return printed.getvalue()
