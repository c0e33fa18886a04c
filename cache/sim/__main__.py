"""`python -m cache.sim` (cli.py). The command's modules are imported inside the Ctrl+C
handling (`run_command`), as gateway/cli.py imports its subcommands: a Ctrl+C while they
load (about half a second) stops it with one line and exit status 130, as one later on
does, not a traceback; `... | head`: exit 141, no traceback."""
import sys

from cache.stdout_reader import run_command


def _main() -> int:
    from cache.sim.cli import main

    return main()


sys.exit(run_command(_main, program="python -m cache.sim"))
