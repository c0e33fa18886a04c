import sys

from cache.sim.cli import main

sys.exit(main())
