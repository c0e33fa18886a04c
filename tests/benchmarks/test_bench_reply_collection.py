"""benchmarks/bench_reply_collection.py, small: both ways collect the same reply and the
same call, and the row reports them."""
from benchmarks.bench_reply_collection import measure


def test_both_ways_agree_and_are_reported():
    row = measure(300, repeats=1)   # measure() asserts the two ways give the same text and one call
    assert row["deltas"] == 300 and row["call_chars"] > 1200
    assert all(row[key] > 0 for key in ("text_before_ms", "text_now_ms", "call_before_ms", "call_now_ms"))
