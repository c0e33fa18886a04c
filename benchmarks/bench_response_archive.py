"""What storing a response costs once a tenant's archive is full: the trim, and the ids.

`ResponseArchive.put` inserts the response and trims the tenant back to `capacity` rows
(least recently used out). Until session 24 the trim deleted every row "NOT IN" the
`capacity` most recent, which visits all of the tenant's rows on every put, and response
ids were 96 random bits, so each insert landed on a random leaf of the primary-key
B-tree. Now the trim visits only the excess (`response_archive.TRIM`) and ids sort by
creation time (`agents_trace.ordered_ids`). In one run this fills four archives of
`--tenants` tenants x `--capacity` responses each, one per combination (whole-scan trim
or excess-only; random or time-ordered ids), then times `--measure` more puts into each
in alternating rounds. Prints one JSON line: medians over rounds of the median µs per put,
and each configuration's ratio to the old one (whole scan, random ids).

    python benchmarks/bench_response_archive.py [--tenants 4] [--capacity 1024] [--measure 1000] [--rounds 5]
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from agents_trace.ordered_ids import time_ordered_hex  # noqa: E402
from gateway.ids import new_id  # noqa: E402
from gateway.response_archive import ResponseArchive  # noqa: E402
from gateway.response_store import StoredResponse  # noqa: E402

# The baseline: the trim as it was, keeping the `capacity` most recent by scanning them all.
WHOLE_SCAN_TRIM = ("DELETE FROM responses WHERE tenant = ? AND id NOT IN "
                   "(SELECT id FROM responses WHERE tenant = ? ORDER BY used_s DESC, rowid DESC LIMIT ?)")


class WholeScanArchive(ResponseArchive):
    __slots__ = ()
    trim_sql = WHOLE_SCAN_TRIM


def random_id() -> str:
    return new_id("resp").replace("-", "_")   # 96 random bits, as before


def ordered_id() -> str:
    return f"resp_{time_ordered_hex(time.time(), 44)}"


CONFIGS = {
    "whole_scan_random_ids": (WholeScanArchive, random_id),
    "whole_scan_ordered_ids": (WholeScanArchive, ordered_id),
    "excess_only_random_ids": (ResponseArchive, random_id),
    "excess_only_ordered_ids": (ResponseArchive, ordered_id),
}
BASELINE = "whole_scan_random_ids"


def stored(response_id: str) -> StoredResponse:
    """A small agent turn: four messages of a few hundred characters."""
    return StoredResponse({"id": response_id, "object": "response", "output": [{"text": "ok " * 40}]},
                          tuple({"role": "user", "content": "context " * 40} for _ in range(4)),
                          ({"role": "user", "content": "next"},))


def put_many(archive: ResponseArchive, make_id, tenants: list[str], count: int) -> list[float]:
    took = []
    for i in range(count):
        item = stored(make_id())
        started = time.perf_counter()
        archive.put(tenants[i % len(tenants)], item)
        took.append(time.perf_counter() - started)
    return took


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_int, default=4, help="tenants whose archives are filled")
    parser.add_argument("--capacity", type=positive_int, default=1024, help="responses kept per tenant (default %(default)s, the gateway's)")
    parser.add_argument("--measure", type=positive_int, default=1000, help="puts timed per round and configuration")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of each configuration; the figures are medians over them")
    args = parser.parse_args(argv)
    tenants = [f"tenant{i}" for i in range(args.tenants)]
    medians: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory() as scratch:
        archives = {}
        for name, (cls, make_id) in CONFIGS.items():
            archives[name] = cls(Path(scratch) / f"{name}.sqlite3", args.capacity)
            put_many(archives[name], make_id, tenants, args.tenants * args.capacity)   # full
        for round_index in range(args.rounds):
            order = list(CONFIGS) if round_index % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                took = put_many(archives[name], CONFIGS[name][1], tenants, args.measure)
                medians[name].append(statistics.median(took) * 1e6)
        for archive in archives.values():
            archive.close()
    per_put = {name: round(statistics.median(values), 1) for name, values in medians.items()}
    result = {"benchmark": "response_archive", "tenants": args.tenants, "capacity": args.capacity,
              "measure": args.measure, "rounds": args.rounds, "put_us_median": per_put,
              "put_us_rounds": {name: [round(v, 1) for v in values] for name, values in medians.items()},
              "baseline_over": {name: round(per_put[BASELINE] / per_put[name], 2) for name in CONFIGS}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
