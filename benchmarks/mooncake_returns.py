"""What a Mooncake trace reveals online about which requests are continued, and when.

A request *continues* an earlier one when its leading blocks (two or more) were all seen
before; the earlier request is the one that first held the last of them. For every
request this prints whether it was continued and after how long, and how well the
features a cache could know when the request finishes (input length, output length,
blocks it already found cached, uncached input, its turn in the conversation) separate continued from not (ROC AUC)
and predict the wait (correlation with the log gap). Prints one JSON object.

    python benchmarks/mooncake_returns.py [--trace ../shared/data/mooncake_conversation_first_half.jsonl]

The trace is read by `cache.trace_format` (Mooncake, or a stepahead-trace/1 trace whose
requests all carry `hash_ids`; times in seconds there). A file that cannot be read, is not
a trace, holds fewer than two requests, or has a request without `hash_ids` is one
`error:` line on stderr and exit status 2, as `python -m cache.sim` refuses it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.trace_format import TraceRecord, read_trace_or_why  # noqa: E402

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mooncake_conversation_first_half.jsonl"


class NotAnalysable(ValueError):
    """The trace cannot be analysed; the message is one line saying why."""


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):  # average ranks over ties
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def correlation(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson's r, rounded; None when either side is constant (r is undefined)."""
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return round(float(np.corrcoef(x, y)[0, 1]), 3)


def read_requests(path: Path) -> tuple[int, list[TraceRecord]]:
    """The block size and requests of the trace at `path`, every one with its `hash_ids`;
    NotAnalysable when the file cannot be read, is not a trace, holds fewer than two
    requests (no time span) or has a request without `hash_ids`."""
    read = read_trace_or_why(path)
    if isinstance(read, str):
        raise NotAnalysable(read)
    header, requests = read
    if len(requests) < 2:
        raise NotAnalysable(f"{path} holds {len(requests)} request{'' if len(requests) == 1 else 's'}; "
                            "the analysis needs at least 2")
    missing = next((index for index, request in enumerate(requests)
                    if request.hash_ids is None and request.input_tokens > 0), None)   # 0 tokens: no blocks
    if missing is not None:
        raise NotAnalysable(f"{path}: request {missing + 1} has no hash_ids (the analysis follows the blocks "
                            "each request shares with earlier ones)")
    return header.block_size, requests


def analyse(path: Path) -> dict:
    block_size, requests = read_requests(path)
    first_holder: dict[int, int] = {}
    leads, parents, turns = [], [], []
    for index, request in enumerate(requests):
        blocks = request.hash_ids or []
        lead = 0
        while lead < len(blocks) and blocks[lead] in first_holder:
            lead += 1
        leads.append(lead)
        parent = first_holder[blocks[lead - 1]] if lead > 1 else None
        parents.append(parent)
        turns.append(1 + (turns[parent] if parent is not None else 0))
        for block in blocks:
            first_holder.setdefault(block, index)
    first_gap: dict[int, float] = {}
    for index, parent in enumerate(parents):
        if parent is not None:
            gap_s = requests[index].t - requests[parent].t
            first_gap[parent] = min(first_gap.get(parent, gap_s), gap_s)
    if not first_gap:
        raise NotAnalysable(f"{path}: no request continues an earlier one (none starts with two or more blocks "
                            "seen before): there are no returns to analyse")
    continued = np.array([index in first_gap for index in range(len(requests))])
    features = {
        "input_tokens": np.array([r.input_tokens for r in requests], dtype=float),
        "output_tokens": np.array([r.output_tokens for r in requests], dtype=float),
        "cached_blocks": np.array(leads, dtype=float),
        "uncached_tokens": np.array([r.input_tokens - block_size * lead for r, lead in zip(requests, leads)],
                                    dtype=float),
        "turn": np.array(turns, dtype=float),   # 1 + the turn of the request it continues
    }
    gaps = np.array([first_gap[i] for i in sorted(first_gap)])
    with_gap = sorted(first_gap)
    span_s = requests[-1].t - requests[0].t
    num_blocks = sum(len(r.hash_ids or []) for r in requests)
    return {
        "trace": str(path), "requests": len(requests), "continuing_requests": sum(p is not None for p in parents),
        "continued_requests": int(continued.sum()),
        "first_return_gap_s": {f"p{q}": round(float(np.percentile(gaps, q)), 1) for q in (10, 25, 50, 75, 90)},
        "blocks_per_s": round(num_blocks / span_s, 1) if span_s > 0 else None,   # None: every request at once
        "auc_continued": {name: round(roc_auc(continued, values), 3) for name, values in features.items()},
        "corr_log_gap": {name: correlation(np.log(gaps), np.log1p(np.maximum(values[with_gap], 0)))
                         for name, values in features.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="Mooncake (or stepahead-trace/1 with hash_ids) JSONL trace (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        result = analyse(args.trace)
    except NotAnalysable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
