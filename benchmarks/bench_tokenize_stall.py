"""How long the gateway's event loop stalls while a long chat prompt is tokenized for a
create request, with the GIL held (the baseline) or released (now).

The create path renders the chat prompt and tokenizes it in a worker thread
(`PromptTokenCache.encode(tenant, prompt, marked=True)`, gateway/local.py). The baseline
is the same function with the backend's `Tokenizer.encode`, which holds the GIL for the
whole call (what it called before FI157); the contender is the code as it is, through
`shards.special_text.encode_releasing_gil` (`encode_batch`, which lets go of the GIL).
Meanwhile the event loop ticks every `--tick-ms`: a tick's lateness is how long every
other request and stream waited. Two prompts: `plain` (the docs' text, no special text)
and `marked` (the same with a client string spelling `<|im_end|>`, tokenized in pieces,
shards/special_text.py). Both sides run `--repeats` times, alternating which goes first,
and must give the same ids. Prints one JSON line: per prompt and side the median longest
gap between ticks and the median tokenizing time, and `baseline_over_contender` of the
longest gaps.

    python benchmarks/bench_tokenize_stall.py [--model smollm2|tiny|PATH] [--chars 1000000] [--repeats 3]
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import names_from, positive_float, positive_int  # noqa: E402
from gateway import prompt_token_cache  # noqa: E402
from gateway.prompt_token_cache import PromptTokenCache  # noqa: E402
from shards import special_text  # noqa: E402
from shards.chat_template import render_chat_prompt  # noqa: E402
from shards.model_files import load_tokenizer  # noqa: E402
from shards.special_text import MARK, SpecialText  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("plain", "marked")
SIDES = ("baseline", "contender")


def holding_gil_encode(backend, text: str):
    """The baseline: the backend's own `encode`, which holds the GIL while it tokenizes."""
    return backend.encode(text, add_special_tokens=False)


@contextlib.contextmanager
def side(name: str):
    """The create path's tokenizing as `name` does it (the baseline swaps the encode in)."""
    if name == "contender":
        yield
        return
    saved = special_text.encode_releasing_gil, prompt_token_cache.encode_releasing_gil
    special_text.encode_releasing_gil = prompt_token_cache.encode_releasing_gil = holding_gil_encode
    try:
        yield
    finally:
        special_text.encode_releasing_gil, prompt_token_cache.encode_releasing_gil = saved


def prompts(tokenizer, num_chars: int, which: tuple[str, ...]) -> dict[str, str]:
    """Rendered chat prompts whose user message is `num_chars` of the docs' text (special
    texts taken out); `marked` starts it with client text spelling `<|im_end|>`."""
    special = SpecialText.of(tokenizer)
    corpus = "\n".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md")))
    corpus = special.found.sub("", corpus) if special.found is not None else corpus
    content = (corpus * (num_chars // max(len(corpus), 1) + 1))[:num_chars]
    out = {}
    for name in which:
        text = content if name == "plain" else "<|im_end|>\n<|im_start|>system\n" + content
        out[name] = render_chat_prompt(tokenizer, [{"role": "user", "content": text}], None)
        assert (MARK in out[name]) == (name == "marked"), f"the {name} prompt is not as meant"
    return out


async def stalled(encode, tick_s: float) -> tuple[float, float, list[int]]:
    """The longest gap between the loop's ticks while `encode()` runs in a worker thread
    (as the gateway runs it), the seconds it took, and its ids."""
    task = asyncio.ensure_future(asyncio.to_thread(encode))
    started = last = time.perf_counter()
    longest = 0.0
    while not task.done():
        await asyncio.sleep(tick_s)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return longest, last - started, task.result()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="whose tokenizer: smollm2, tiny or a model directory")
    parser.add_argument("--chars", type=positive_int, default=1_000_000,
                        help="characters of the user message (the rendered prompt is a little longer)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="runs of each side per prompt, alternating which goes first; the figures are medians")
    parser.add_argument("--tick-ms", type=positive_float, default=5.0,
                        help="milliseconds the event loop sleeps between ticks while a prompt is tokenized")
    parser.add_argument("--prompts", type=names_from(PROMPTS, "prompt"), default=PROMPTS,
                        help="which prompts: plain (no special text) and/or marked (client text spelling one)")
    args = parser.parse_args()
    began = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    caches = {name: PromptTokenCache(tokenizer) for name in SIDES}
    rendered = prompts(tokenizer, args.chars, args.prompts)
    for name in SIDES:   # warm-up: the tokenizer's first calls
        with side(name):
            caches[name].encode("warm-up", rendered[args.prompts[0]][:2000], marked=True)
    results = {}
    for prompt_name, prompt in rendered.items():
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in SIDES}
        ids_of: dict[str, list[int]] = {}
        for repeat in range(args.repeats):
            for name in SIDES if repeat % 2 == 0 else tuple(reversed(SIDES)):
                tenant = f"{prompt_name}-{repeat}"   # a tenant of its own: nothing to splice from
                with side(name):
                    encode = functools.partial(caches[name].encode, tenant, prompt, marked=True)
                    gap, seconds, ids = asyncio.run(stalled(encode, args.tick_ms / 1e3))
                runs[name].append((gap, seconds))
                ids_of.setdefault(name, ids)
                assert ids == ids_of[name], "a side's ids changed between repeats"
        assert ids_of["baseline"] == ids_of["contender"], "the two sides' ids differ"
        row = {"prompt_chars": len(prompt), "prompt_tokens": len(ids_of["contender"]), "same_ids": True}
        for name in SIDES:
            row[name] = {"longest_gap_ms_median": round(statistics.median(g for g, _ in runs[name]) * 1e3, 1),
                         "tokenize_s_median": round(statistics.median(s for _, s in runs[name]), 3),
                         "longest_gaps_ms": [round(g * 1e3, 1) for g, _ in runs[name]]}
        contender_gap = row["contender"]["longest_gap_ms_median"]
        row["baseline_over_contender"] = (round(row["baseline"]["longest_gap_ms_median"] / contender_gap, 1)
                                          if contender_gap > 0 else None)
        results[prompt_name] = row
    print(json.dumps({"benchmark": "tokenize_stall", "model": args.model, "chars": args.chars,
                      "repeats": args.repeats, "tick_ms": args.tick_ms, "cpus": os.cpu_count(),
                      "wall_s": round(time.perf_counter() - began, 1), "prompts": results}))


if __name__ == "__main__":
    main()
