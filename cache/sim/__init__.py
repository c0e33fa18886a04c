"""The trace simulator: replay a request trace through the real cache code.

`python -m cache.sim --trace FILE --hot-blocks N [--host-blocks M] [--policy P] --json`
(see cli.py); `replay` (replay.py) is the library entry point. This module imports
nothing, so `python -m cache.sim` can handle a Ctrl+C from its first line (__main__.py).
"""
