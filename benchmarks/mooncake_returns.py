"""What a Mooncake trace reveals online about which requests are continued, and when.

A request *continues* an earlier one when its leading blocks (two or more) were all seen
before; the earlier request is the one that first held the last of them. For every
request this prints whether it was continued and after how long, and how well the
features a cache could know when the request finishes (input length, output length,
blocks it already found cached, uncached input, its turn in the conversation) separate continued from not (ROC AUC)
and predict the wait (correlation with the log gap). Prints one JSON object.

    python benchmarks/mooncake_returns.py [--trace ../shared/data/mooncake_conversation_first_half.jsonl]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mooncake_conversation_first_half.jsonl"


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


def analyse(path: Path) -> dict:
    requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first_holder: dict[int, int] = {}
    leads, parents, turns = [], [], []
    for index, request in enumerate(requests):
        blocks = request["hash_ids"]
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
            gap_s = (requests[index]["timestamp"] - requests[parent]["timestamp"]) / 1000
            first_gap[parent] = min(first_gap.get(parent, gap_s), gap_s)
    continued = np.array([index in first_gap for index in range(len(requests))])
    features = {
        "input_tokens": np.array([r["input_length"] for r in requests], dtype=float),
        "output_tokens": np.array([r["output_length"] for r in requests], dtype=float),
        "cached_blocks": np.array(leads, dtype=float),
        "uncached_tokens": np.array([r["input_length"] - 512 * lead for r, lead in zip(requests, leads)], dtype=float),
        "turn": np.array(turns, dtype=float),   # 1 + the turn of the request it continues
    }
    gaps = np.array([first_gap[i] for i in sorted(first_gap)])
    with_gap = sorted(first_gap)
    span_s = (requests[-1]["timestamp"] - requests[0]["timestamp"]) / 1000
    num_blocks = sum(len(r["hash_ids"]) for r in requests)
    return {
        "trace": str(path), "requests": len(requests), "continuing_requests": sum(p is not None for p in parents),
        "continued_requests": int(continued.sum()),
        "first_return_gap_s": {f"p{q}": round(float(np.percentile(gaps, q)), 1) for q in (10, 25, 50, 75, 90)},
        "blocks_per_s": round(num_blocks / span_s, 1),
        "auc_continued": {name: round(roc_auc(continued, values), 3) for name, values in features.items()},
        "corr_log_gap": {name: correlation(np.log(gaps), np.log1p(np.maximum(values[with_gap], 0)))
                         for name, values in features.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    print(json.dumps(analyse(parser.parse_args().trace)))


if __name__ == "__main__":
    main()
