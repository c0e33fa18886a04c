"""How a structured reply's schema work grows with the schema (QA134: hostile schemas stalled
every tenant on the event loop for seconds to hours).

For three shapes a hostile tenant used — an `anyOf` whose two branches are the same `$ref`,
nested D deep (2^D paths); an `enum` of N strings; a `pattern` with a character class of C
characters — it times, in one process and run, the door's checks
(`local_schemas.local_schema`: `door` is "400" for a schema past OpenAI's size limits, and
`door_s` what deciding took) and, whatever the door says (the walking must hold without
it), writing the reply object from nothing (`walk_s`: `tool_forcing.forced_json` with a
model that writes nothing, so every character is the filler's). Sizes double from row to
row; `growth` is a row's `walk_s` ÷ the previous row's: about 2 for work linear in the
size, 4 for quadratic, far more for exponential. Prints one JSON line per shape and size
(medians of `--repeats`), then a summary line with each shape's median growth.

    python benchmarks/bench_schema_walk.py [--repeats 3]
"""
from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from gateway.errors import ApiError  # noqa: E402
from gateway.local_schemas import local_schema  # noqa: E402
from gateway.tool_forcing import forced_json  # noqa: E402


def same_ref_branches(depth: int) -> dict:
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "object"}
    return {"$defs": defs, "type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "required": ["a"]}


def big_enum(size: int) -> dict:
    return {"type": "object", "properties": {"a": {"enum": [f"v{n}" for n in range(size)]}}, "required": ["a"]}


def char_class(size: int) -> dict:
    members = "".join(chr(0x4E00 + n) for n in range(size))   # CJK ideographs: one class, no ranges
    return {"type": "object", "properties": {"a": {"type": "string", "pattern": f"^[{members}]{{5}}$"}},
            "required": ["a"]}


SHAPES = {"same_ref_anyof_depth": (same_ref_branches, (8, 16, 32, 64)),
          "enum_values": (big_enum, (1000, 2000, 4000, 8000)),
          "char_class_chars": (char_class, (2500, 5000, 10000, 20000))}


def door(schema: dict) -> str:
    """"400" when the door refuses `schema`, else "ok"."""
    try:
        local_schema(schema, "response_format.json_schema.schema")
    except ApiError:
        return "400"
    return "ok"


def walk(schema: dict) -> None:
    """The reply object for `schema`, written from nothing (a model that writes nothing)."""
    async def nothing(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return ""

    async def write() -> str:
        return "".join([piece async for piece in forced_json(schema, nothing, 16)])
    json.loads(asyncio.run(write()))


def median_s(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started_s = time.perf_counter()
        work()
        times.append(time.perf_counter() - started_s)
    return statistics.median(times)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs of each way; the figures are their medians")
    args = parser.parse_args()
    growths: dict[str, list[float]] = {}
    for shape, (make, sizes) in SHAPES.items():
        previous_s = None
        for size in sizes:
            schema = make(size)
            outcome = door(schema)
            door_s = median_s(lambda: door(schema), args.repeats)
            walk_s = median_s(lambda: walk(schema), args.repeats)
            growth = None if previous_s is None else round(walk_s / previous_s, 2)
            if growth is not None:
                growths.setdefault(shape, []).append(growth)
            print(json.dumps({"shape": shape, "size": size, "door": outcome, "door_s": round(door_s, 5),
                              "walk_s": round(walk_s, 5), "growth": growth}), flush=True)
            previous_s = walk_s
    print(json.dumps({"median_growth_per_doubling": {shape: statistics.median(values)
                                                     for shape, values in growths.items()}}))


if __name__ == "__main__":
    main()
