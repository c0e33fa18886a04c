"""What a worker pays per generated token to turn it into text, as replies grow long.

The baseline decodes the whole output so far at every token (as shards/detokenizer.py did
before session 34): a token costs more the longer the reply. The contender is
`shards.detokenizer.Detokenizer`, which decodes a window of the last few tokens. Both get
the same token ids (the project's docs, tokenized), one token at a time with a stop
string to watch, in alternating rounds after a warm-up; both texts are checked against
the whole output's decode. Prints one JSON line: per reply length, the median µs per
token of each and `whole_over_window`.

    python benchmarks/bench_detokenizer.py [--model smollm2|tiny] [--lengths 100,500,2000,4000] [--rounds 5]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from shards.detokenizer import REPLACEMENT_CHAR, Detokenizer  # noqa: E402
from shards.model_files import load_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STOP = ("</answer>",)


class WholeDecodeDetokenizer:
    """The baseline: the whole output decoded at each token; the text up to a possible
    stop string emitted (the same emission rule as the contender's)."""

    def __init__(self, tokenizer, stop: tuple[str, ...]) -> None:
        self.tokenizer, self.stop = tokenizer, stop
        self.token_ids: list[int] = []
        self.num_emitted_chars = 0

    def push(self, token_id: int) -> str:
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith(REPLACEMENT_CHAR):
            return ""
        end = len(text) - max((n for stop in self.stop for n in range(1, len(stop))
                               if text.endswith(stop[:n])), default=0)
        delta, self.num_emitted_chars = text[self.num_emitted_chars:end], max(end, self.num_emitted_chars)
        return delta

    def flush(self) -> str:
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        delta, self.num_emitted_chars = text[self.num_emitted_chars:], len(text)
        return delta


def seconds_per_token(make, token_ids: list[int], expected: str) -> float:
    detokenizer = make()
    started = time.perf_counter()
    text = "".join(detokenizer.push(token) for token in token_ids) + detokenizer.flush()
    elapsed = time.perf_counter() - started
    assert text == expected, "a detokenizer's text is not the whole output's decode"
    return elapsed / len(token_ids)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="whose tokenizer: smollm2 (default) or tiny")
    parser.add_argument("--lengths", type=positive_ints, default="100,500,2000,4000", help="reply lengths in tokens")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="alternating timed rounds of both ways; the figures are medians over them")
    args = parser.parse_args()
    tokenizer = load_tokenizer(args.model)
    corpus = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    all_ids = tokenizer.encode(corpus, add_special_tokens=False)
    lengths = list(args.lengths)
    assert max(lengths) <= len(all_ids), f"the corpus has only {len(all_ids)} tokens"
    contenders = {"whole": lambda: WholeDecodeDetokenizer(tokenizer, STOP),
                  "window": lambda: Detokenizer(tokenizer, STOP)}
    rows = []
    for length in lengths:
        token_ids = all_ids[:length]
        expected = tokenizer.decode(token_ids, skip_special_tokens=True)
        for make in contenders.values():   # warm-up
            seconds_per_token(make, token_ids[:50], tokenizer.decode(token_ids[:50], skip_special_tokens=True))
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for round_index in range(args.rounds):
            order = list(contenders) if round_index % 2 == 0 else list(reversed(contenders))
            for name in order:
                times[name].append(seconds_per_token(contenders[name], token_ids, expected))
        whole, window = statistics.median(times["whole"]), statistics.median(times["window"])
        rows.append({"reply_tokens": length, "whole_us_per_token": round(whole * 1e6, 2),
                     "window_us_per_token": round(window * 1e6, 2),
                     "whole_over_window": round(whole / window, 2)})
    print(json.dumps({"model": args.model, "rounds": args.rounds, "stop": list(STOP), "replies": rows}))


if __name__ == "__main__":
    main()
