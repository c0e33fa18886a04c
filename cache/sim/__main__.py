"""`python -m cache.sim` (cli.py). The command's modules are imported inside the Ctrl+C
handling, as gateway/cli.py imports its subcommands: a Ctrl+C while they load (about half
a second) stops it with one line and exit status 130, as one later on does, not a traceback."""
import sys

from cache.sim import INTERRUPTED_EXIT
from cache.stdout_reader import quiet_when_reader_leaves


def _main() -> int:
    try:
        from cache.sim.cli import main

        return main()
    except KeyboardInterrupt:   # Ctrl+C before the runs (loading, reading the trace); cli.main reports later ones
        print("python -m cache.sim: stopped", file=sys.stderr)
        return INTERRUPTED_EXIT


sys.exit(quiet_when_reader_leaves(_main, program="python -m cache.sim"))   # `... | head`: exit 141, no traceback
