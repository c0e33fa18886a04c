"""Weights and KV cache in bfloat16 against float32: speed and what it does to the model.

Both copies of the model are loaded in one process and timed in one run, the order
alternating per repeat (medians over --repeats):
- prefill: time to first token of a --prompt-lengths prompt, nothing cached, through
  `ModelRunner.start` (the engine's real path);
- decode: one `ModelRunner.step_many` step of N requests (--batch-sizes) that each hold
  a --decode-context prompt;
- quality: on the tokens of --text-file (teacher-forced, one forward pass): perplexity
  in each dtype, how often both pick the same next token, and the mean KL divergence
  from float32's next-token distribution; and for a few chat prompts, how many of the
  greedy reply's first --reply-tokens tokens are identical.
Prints one JSON line per measurement with the ratio float32 ÷ contender (above 1: the
contender is faster), and a last summary line.

    python benchmarks/bench_dtype.py --model smollm2
    python benchmarks/bench_dtype.py --model smollm2 --contender float16 --device cuda
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
import torch  # noqa: E402

from benchmarks.e2e_runs import policy_orders  # noqa: E402
from shards.chat_template import render_chat  # noqa: E402
from shards.model_loader import DTYPES, load_model  # noqa: E402
from shards.model_runner import ModelRunner  # noqa: E402
from shards.protocol import SamplingParams, WorkItem  # noqa: E402

BASELINE = "float32"
CHAT_PROMPTS = ("What is the capital of France?", "Write a Python function that reverses a list.",
                "List three uses of a hash map.")


def _runner(loaded, tokens: int) -> ModelRunner:
    return ModelRunner(loaded, num_hot_blocks=tokens // 16 + 64, block_size=16, prefix_caching=False)


def prefill_s(loaded, prompt: list[int]) -> float:
    """Time to first token of `prompt` with nothing cached."""
    runner = _runner(loaded, len(prompt) + 16)
    seq, _ = runner.start(WorkItem("p", "t", prompt, SamplingParams(max_tokens=1, temperature=0.0)),
                          loaded.tokenizer)
    runner.synchronize()
    return seq.first_token_s - seq.started_s


def decode_step_s(loaded, prompts: list[list[int]], steps: int) -> float:
    """Seconds per decode step of all `prompts` at once (after their prefill)."""
    runner = _runner(loaded, sum(len(p) + steps + 16 for p in prompts))
    params = SamplingParams(max_tokens=steps + 1, temperature=0.0, ignore_eos=True)
    seqs = [runner.start(WorkItem(f"r{i}", "t", p, params), loaded.tokenizer)[0] for i, p in enumerate(prompts)]
    start = time.perf_counter()
    for _ in range(steps):
        runner.step_many(seqs)
    runner.synchronize()
    return (time.perf_counter() - start) / steps


def next_token_agreement(base, other, token_ids: list[int]) -> dict:
    """Perplexities, same-argmax share and mean KL(base || other) on one text."""
    ids = torch.tensor([token_ids], device=next(base.model.parameters()).device)
    with torch.no_grad():
        logp = [torch.log_softmax(m.model(ids).logits.float()[0], -1) for m in (base, other)]
    targets = ids[0, 1:, None]
    nll = [-lp[:-1].gather(1, targets).mean().item() for lp in logp]
    kl = (logp[0].exp() * (logp[0] - logp[1])).sum(-1).mean().item()
    same = (logp[0].argmax(-1) == logp[1].argmax(-1)).float().mean().item()
    return {"tokens": len(token_ids), "perplexity_baseline": round(float(torch.tensor(nll[0]).exp()), 4),
            "perplexity_contender": round(float(torch.tensor(nll[1]).exp()), 4),
            "same_next_token": round(same, 4), "mean_kl": float(f"{kl:.3g}")}


def greedy_reply(loaded, prompt: str, tokens: int) -> list[int]:
    """The first `tokens` greedy tokens of the reply to `prompt`, rendered as the gateway does."""
    ids = render_chat(loaded.tokenizer, [{"role": "user", "content": prompt}])
    runner = _runner(loaded, len(ids) + tokens + 16)
    params = SamplingParams(max_tokens=tokens, temperature=0.0)
    seq, token = runner.start(WorkItem("g", "t", ids, params), loaded.tokenizer)
    while len(seq.output_ids) < tokens and not runner.is_stop_token(token, params):
        token = runner.step(seq)
    return list(seq.output_ids)


def _same_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _timed_pair(models: dict, measure, repeats: int) -> dict[str, float]:
    """Median of `measure(loaded)` per dtype, the order alternating per repeat."""
    times: dict[str, list[float]] = {name: [] for name in models}
    for loaded in models.values():  # warm-up, untimed
        measure(loaded)
    for order in policy_orders(list(models), repeats):
        for name in order:
            times[name].append(measure(models[name]))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, or a model directory")
    parser.add_argument("--contender", default="bfloat16", choices=[d for d in DTYPES if d != BASELINE],
                        help="the dtype compared with the float32 baseline")
    parser.add_argument("--prompt-lengths", type=positive_ints, default="512,2048",
                        help="prompt tokens of the timed prefills, comma-separated")
    parser.add_argument("--batch-sizes", type=positive_ints, default="1,8",
                        help="requests decoding at once in the timed decode steps, comma-separated")
    parser.add_argument("--decode-context", type=positive_int, default=1024,
                        help="cached tokens of each decoding request")
    parser.add_argument("--steps", type=positive_int, default=8, help="decode steps per timed run")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs of each dtype, alternating; the figures are their medians")
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--text-file", default=str(Path(__file__).resolve().parent.parent / "docs" / "tracing.md"),
                        help="text whose next tokens both copies predict")
    parser.add_argument("--max-text-tokens", type=positive_int, default=1024,
                        help="tokens of --text-file the two copies read")
    parser.add_argument("--reply-tokens", type=positive_int, default=40,
                        help="greedy tokens each copy generates for the agreement check")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the prompts' token ids")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {dtype: load_model(args.model, dtype=dtype, device=args.device) for dtype in (BASELINE, args.contender)}
    base, other = models[BASELINE], models[args.contender]
    vocab = min(base.model.config.vocab_size, len(base.tokenizer)) - 8
    rng = random.Random(args.seed)
    speedups = []

    def report(row: dict, medians: dict[str, float]) -> None:
        ratio = medians[BASELINE] / medians[args.contender]
        speedups.append(ratio)
        print(json.dumps({**row, f"{BASELINE}_s": round(medians[BASELINE], 5),
                          f"{args.contender}_s": round(medians[args.contender], 5),
                          "speedup": round(ratio, 3)}), flush=True)

    for length in args.prompt_lengths:
        prompt = [rng.randrange(vocab) for _ in range(length)]
        report({"measure": "prefill", "prompt_tokens": length},
               _timed_pair(models, lambda m, p=prompt: prefill_s(m, p), args.repeats))
    for num in args.batch_sizes:
        prompts = [[rng.randrange(vocab) for _ in range(args.decode_context)] for _ in range(num)]
        report({"measure": "decode_step", "requests": num, "context_tokens": args.decode_context},
               _timed_pair(models, lambda m, p=prompts: decode_step_s(m, p, args.steps), args.repeats))
    text_path = Path(args.text_file)
    if not text_path.is_file():
        raise SystemExit(f"error: --text-file {text_path} does not exist")
    text_ids = base.tokenizer(text_path.read_text())["input_ids"][: args.max_text_tokens]
    quality = {"measure": "quality", "text_file": text_path.name, **next_token_agreement(base, other, text_ids)}
    replies = []
    if getattr(base.tokenizer, "chat_template", None):
        for prompt in CHAT_PROMPTS:
            a, b = (greedy_reply(m, prompt, args.reply_tokens) for m in (base, other))
            replies.append({"prompt": prompt, "identical_tokens": _same_prefix(a, b), "of": min(len(a), len(b))})
    print(json.dumps({**quality, "greedy_replies": replies}), flush=True)
    print(json.dumps({"summary": True, "model": base.model_id, "device": args.device, "baseline": BASELINE,
                      "contender": args.contender, "threads": torch.get_num_threads(),
                      "speedup_median": round(statistics.median(speedups), 3),
                      "speedup_min": round(min(speedups), 3), "same_next_token": quality["same_next_token"]}))


if __name__ == "__main__":
    main()
