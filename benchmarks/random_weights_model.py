"""Write a model directory with a real model's architecture and tokenizer but random
weights, for timing runs on machines the weights cannot be copied to.

Prefill and decode time depend on the shapes (layers, heads, widths, vocabulary), not on
the weight values, so `bench_prefix_reuse.py --model OUT` times the same work as the real
model; its generated text is noise. The source directory needs `config.json` and the
tokenizer files, not the weights:

    python benchmarks/random_weights_model.py ~/.cache/stepahead/models/smollm2-135m-instruct /tmp/smollm2-shape
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json", "generation_config.json")


def write_random_model(source: Path, out: Path, seed: int = 0) -> Path:
    """Copy `source`'s config and tokenizer into `out` with seeded random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(source)
    model = AutoModelForCausalLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("source", type=Path, help="model directory with config.json and tokenizer files")
    parser.add_argument("out", type=Path, help="directory to write the random-weights model into (created)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights")
    args = parser.parse_args()
    if not (args.source / "config.json").is_file():
        parser.error(f"{args.source} has no config.json")
    print(write_random_model(args.source, args.out, args.seed))


if __name__ == "__main__":
    main()
