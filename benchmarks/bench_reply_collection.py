"""Collecting a long reply: the gateway's `Collected` and `ToolCallStreamParser` against
the way they worked before session 38, in one run.

    python benchmarks/bench_reply_collection.py [--sizes 5000,20000,80000] [--repeats 3]

For each size, a reply of that many 4-character deltas is collected (text deltas into
`Collected`; one tool call's text into the stream parser) by the current code and by a
reference that does what the old code did: `text += delta` on an attribute (CPython's
in-place concatenation does not apply there, so each delta copies the text) and a search
of the whole open call for its closing tag at every delta. Both produce the same result
(checked). Prints one JSON line: median milliseconds per size and the ratios.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from gateway.backend import TextDelta  # noqa: E402
from gateway.collected import Collected  # noqa: E402
from gateway.tool_calls import CLOSE_TAG, CallPiece, ToolCallStreamParser  # noqa: E402


class ConcatenatedText:
    """The old `Collected.text`: a string attribute grown with `+=`."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text = ""

    def add(self, event: TextDelta) -> None:
        self.text += event.text


class RescanningCall:
    """The old parser inside an open call: the buffer grows, and the whole of it is
    searched for the closing tag at every delta."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = ""

    def feed(self, delta: str) -> bool:
        self.buffer += delta
        return CLOSE_TAG in self.buffer


def _timed(run) -> float:
    started_s = time.perf_counter()
    run()
    return (time.perf_counter() - started_s) * 1e3


def measure(num_deltas: int, repeats: int) -> dict:
    deltas = [TextDelta("abcd") for _ in range(num_deltas)]
    call = '<tool_call>{"name": "f", "arguments": {"text": "' + "word " * (num_deltas - 12) + '"}}</tool_call>'
    pieces = [call[i:i + 4] for i in range(0, len(call), 4)]

    def collect(collector) -> str:
        for event in deltas:
            collector.add(event)
        return collector.text

    def parse_now() -> int:
        parser = ToolCallStreamParser(frozenset({"f"}))
        out = []
        for piece in pieces:
            out += parser.feed(piece)
        return sum(isinstance(p, CallPiece) for p in out)

    def parse_before() -> int:
        reference = RescanningCall()
        return sum(reference.feed(piece) for piece in pieces[1:])   # the tag opened in the first piece

    assert collect(Collected()) == collect(ConcatenatedText()) and parse_now() == parse_before() == 1
    times = {name: statistics.median(_timed(run) for _ in range(repeats)) for name, run in (
        ("text_before_ms", lambda: collect(ConcatenatedText())), ("text_now_ms", lambda: collect(Collected())),
        ("call_before_ms", parse_before), ("call_now_ms", parse_now))}
    return {"deltas": num_deltas, "call_chars": len(call), **{k: round(v, 2) for k, v in times.items()},
            "text_ratio": round(times["text_before_ms"] / times["text_now_ms"], 1),
            "call_ratio": round(times["call_before_ms"] / times["call_now_ms"], 1)}


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--sizes", type=positive_ints, default="5000,20000,80000", help="deltas per reply")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed collections of each way per size; the figures are their medians")
    args = parser.parse_args()
    rows = [measure(size, args.repeats) for size in args.sizes]
    print(json.dumps({"benchmark": "reply_collection", "repeats": args.repeats, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
