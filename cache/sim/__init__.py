"""The trace simulator: replay a request trace through the real cache code.

`python -m cache.sim --trace FILE --hot-blocks N [--host-blocks M] [--policy P] --json`
(see cli.py); `replay` (replay.py) is the library entry point.
"""
