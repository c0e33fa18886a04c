#!/usr/bin/env bash
# The engine's GPU check in one run (about 12 minutes on one H200 in session 40, more than one
# 10-minute device call: split it there; the CUDA tests alone take 40 s):
# the CUDA tests (reused-prefix logits equal a CPU recompute, host tier, seeded sampling,
# prefix export/import, a LocalEngine request on the GPU, batched decode), then the engine
# benchmark on the GPU in float32 and bfloat16, batched decode on the GPU in both (runner
# and a one-worker LocalEngine), and the engine
# benchmark on the machine's CPUs for comparison.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        # results: OUT_DIR (default ./gpu-check)
#
# Environment:
#   WHEELS=DIR      install these wheels into /tmp/site first (a machine whose Python lacks
#                   the project's transformers version; docs/benchmarks.md says which)
#   SHAPE_FROM=DIR  time a model with this directory's config and tokenizer and random
#                   weights (benchmarks/random_weights_model.py), for machines the real
#                   weights cannot reach; default: the embedded SmolLM2 itself
set -uo pipefail
out=${1:-${OUT:-gpu-check}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [[ -n "${WHEELS:-}" ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  echo "cpus $(nproc)"
} | tee "$out/env.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/shards/test_device.py \
  tests/shards/test_model_runner.py tests/shards/test_kv_cache.py tests/shards/test_sampling.py \
  tests/shards/test_kv_transfer.py tests/shards/test_batched_decode.py 2>&1 | tee "$out/tests.log" | tail -5
model=smollm2
if [[ -n "${SHAPE_FROM:-}" ]]; then
  model=/tmp/stepahead-model-shape
  python3 benchmarks/random_weights_model.py "$SHAPE_FROM" "$model" >/dev/null || exit 1
fi
for args in "--model $model --dtype float32" "--model $model --dtype bfloat16" "--model tiny"; do
  timeout 150 python3 benchmarks/bench_prefix_reuse.py $args --device cuda --repeats 7
done | tee "$out/bench_cuda.jsonl"
for dtype in float32 bfloat16; do
  timeout 240 python3 benchmarks/bench_decode.py --model "$model" --device cuda --dtype $dtype --batch-sizes 1,4,16 --engine
done | tee "$out/bench_decode_cuda.jsonl"
timeout 150 python3 benchmarks/bench_prefix_reuse.py --model "$model" --device cpu --threads "$(nproc)" \
  --repeats 3 | tee "$out/bench_cpu.jsonl"
