"""`python -m cache.sim` handles Ctrl+C from its first line: one that lands while its
modules load (the first half second or so) stops it with one line and exit status 130,
not a traceback, as one later on does. The import is made to raise KeyboardInterrupt, so
the test does not depend on when a real signal lands."""
from __future__ import annotations

import subprocess
import sys

# Runs `python -m cache.sim` with an import hook that raises KeyboardInterrupt as the
# command line's module loads, as a Ctrl+C at that moment would.
INTERRUPTED_IMPORT = """
import runpy, sys

class CtrlCOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == "cache.sim.cli":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlCOnImport())
sys.argv = ["python -m cache.sim", "--trace", "nosuch.jsonl", "--hot-blocks", "1"]
runpy.run_module("cache.sim", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_status_130():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (done.returncode, done.stderr) == (130, "python -m cache.sim: stopped\n")
