"""`python -m agents_trace.replay TRACE ...` (also `stepahead replay`)."""
from agents_trace.replay.cli import main

raise SystemExit(main())
