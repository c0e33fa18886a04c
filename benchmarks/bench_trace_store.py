"""What the trace writer pays per step as the store grows: random vs time-ordered session ids.

The store keys sessions and steps by (tenant, session[, index]) in SQLite B-trees. A random
id puts every new session on a random leaf page, so each transaction dirties (and the WAL
copies) about one page per step however few steps it holds; an id that sorts by creation
time appends at the right edge. In one run this fills two stores with `--sessions`
one-step sessions each, one with the old ids (`sess_` + 16 random hex digits, the
baseline) and one with the ids `SessionTable` gives sessions it stitches itself (the
contender), then times `TraceStore.write` of `--measure` more sessions in batches of
`--batch` steps (the writer's 20 ms linger gathers about 13 at 650 requests/s), in
alternating rounds. Prints one JSON line: medians of the rounds, µs of wall time per step,
and `random_over_ordered`.

    python benchmarks/bench_trace_store.py [--sessions 200000] [--measure 4000] [--rounds 5]
"""
from __future__ import annotations

import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_int  # noqa: E402
from agents_trace.conversation import prefix_digests  # noqa: E402
from agents_trace.records import After, SessionId, Step  # noqa: E402
from agents_trace.sessions import SessionTable  # noqa: E402
from agents_trace.store import StepRow, TraceStore  # noqa: E402

TENANT = "bench"
STEPS_PER_S = 650.0     # the arrival rate the simulated clock advances at


def random_id(_now_s: float) -> str:
    """The baseline: session ids as the tracer made them before session 23."""
    return f"sess_{secrets.token_hex(8)}"


def stitched_id_maker() -> Callable[[float], str]:
    """The contender: each call opens a new stitched session in a real `SessionTable`
    (a first user message never seen before) and returns the id it was given."""
    table = SessionTable(idle_timeout_s=1e9, max_sessions=1000)
    count = [0]

    def make(now_s: float) -> str:
        count[0] += 1
        messages = [{"role": "user", "content": f"task {count[0]}"}]
        opened, _ = table.open_step(TENANT, None, prefix_digests(TENANT, messages), messages, now_s)
        table.close_step(TENANT, opened.session, opened.index, now_s, request_digest=None, num_messages=1,
                         response_digest=None, asked={})
        return opened.session

    return make


def one_step(session: str, at_s: float) -> StepRow:
    step = Step(TENANT, SessionId(session), 0, "new", "chat", "m", None, at_s, at_s + 0.05, After("start"),
                None, None, 1, False, 200, 0, 16, 0.02, "w0", "stop", ())
    return StepRow(step, None, None, None)


class StoreUnderTest:
    """One store and its id scheme, with a simulated clock shared by fill and measure."""

    def __init__(self, path: Path, make_id: Callable[[float], str]) -> None:
        self.store = TraceStore(path, max_age_s=1e12, max_bytes=1 << 40)
        self.store.open()
        self.make_id = make_id
        self.now_s = 1.8e9

    def write(self, num_steps: int, batch: int) -> float:
        """Write `num_steps` new one-step sessions; seconds spent inside `write`."""
        spent_s = 0.0
        for start in range(0, num_steps, batch):
            rows = []
            for _ in range(min(batch, num_steps - start)):
                self.now_s += 1.0 / STEPS_PER_S
                rows.append(one_step(self.make_id(self.now_s), self.now_s))
            began_s = time.perf_counter()
            self.store.write(rows, [])
            spent_s += time.perf_counter() - began_s
        return spent_s

    def size_mb(self) -> float:
        """The database file and its write-ahead log, in MB."""
        wal = self.store.path.with_name(self.store.path.name + "-wal")
        return round((self.store.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / 1e6, 1)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--sessions", type=non_negative_int, default=200_000,
                        help="sessions in each store before timing")
    parser.add_argument("--measure", type=positive_int, default=4000, help="sessions written per timed round")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of each store; the figures are medians over them")
    parser.add_argument("--batch", type=positive_int, default=13, help="steps per transaction")
    args = parser.parse_args()
    if args.sessions < 0 or min(args.measure, args.rounds, args.batch) < 1:
        parser.error("--measure, --rounds and --batch must be >= 1, --sessions >= 0")
    started_s = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-trace-store-") as scratch:
        stores = {"random": StoreUnderTest(Path(scratch) / "random.sqlite3", random_id),
                  "ordered": StoreUnderTest(Path(scratch) / "ordered.sqlite3", stitched_id_maker())}
        for name, store in stores.items():
            print(f"filling the {name}-id store with {args.sessions:,} sessions", file=sys.stderr, flush=True)
            store.write(args.sessions, 500)
        per_step_us: dict[str, list[float]] = {name: [] for name in stores}
        for round_index in range(args.rounds):
            order = list(stores) if round_index % 2 == 0 else list(reversed(stores))
            for name in order:
                per_step_us[name].append(stores[name].write(args.measure, args.batch) / args.measure * 1e6)
        result = {name: {"write_us_per_step_median": round(statistics.median(values), 1),
                         "write_us_per_step_rounds": [round(v, 1) for v in values],
                         "store_mb": stores[name].size_mb()}
                  for name, values in per_step_us.items()}
        for store in stores.values():
            store.store.close()
    result["random_over_ordered"] = round(result["random"]["write_us_per_step_median"]
                                          / result["ordered"]["write_us_per_step_median"], 2)
    result["config"] = vars(args)
    result["wall_s"] = round(time.perf_counter() - started_s, 1)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
