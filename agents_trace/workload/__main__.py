"""`python -m agents_trace.workload generate ...` (also `stepahead workload generate`)."""
from agents_trace.workload.cli import main

raise SystemExit(main())
