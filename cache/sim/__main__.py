import sys

from cache.sim.cli import INTERRUPTED_EXIT, main
from cache.stdout_reader import quiet_when_reader_leaves


def _main() -> int:
    try:
        return main()
    except KeyboardInterrupt:   # Ctrl+C before the runs (reading the trace); cli.main reports those after
        print("python -m cache.sim: stopped", file=sys.stderr)
        return INTERRUPTED_EXIT


sys.exit(quiet_when_reader_leaves(_main, program="python -m cache.sim"))   # `... | head`: exit 141, no traceback
