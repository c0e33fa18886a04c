import sys

from cache.sim.cli import main
from cache.stdout_reader import quiet_when_reader_leaves

sys.exit(quiet_when_reader_leaves(main))   # `python -m cache.sim ... | head`: exit 141, no traceback
