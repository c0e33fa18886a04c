#!/usr/bin/env bash
# LiteLLM's proxy, the gateway anchor of benchmarks/bench_gateway_overhead.py, installed in a
# virtual environment of its own (.venvs/litellm-proxy): litellm[proxy] pins its own litellm
# release and a few dozen extras, which must not replace the project's litellm. Prints the
# path of its `litellm` command, which the benchmark finds there by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venvs/litellm-proxy
if [ ! -x "$VENV/bin/litellm" ]; then
  python -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q 'litellm[proxy]'
fi
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/litellm" --version >/dev/null
echo "$VENV/bin/litellm"
