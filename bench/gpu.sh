#!/usr/bin/env bash
# The bench sweep on one CUDA GPU (e.g. the H200 device machine) in a few minutes.
# Needs a CUDA Python environment with vLLM 0.32 and this package: pip install -e ".[cuda,bench]".
#   bench/gpu.sh                                           # the demo pair, bf16
#   TARGET=Qwen/Qwen3-8B DRAFTER=z-lab/Qwen3-8B-DFlash-b16 bench/gpu.sh --prompt-sets mine=prompts.jsonl
# All methods' engines share the device (gpu_memory_utilization split between them); CUDA graphs on.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
export PYTHONUNBUFFERED=1
exec "$PY" -m dflash_vllm.cli bench \
  --target "${TARGET:-deploy/demo/target}" --drafter "${DRAFTER:-deploy/demo/drafter}" \
  --concurrency "${CONCURRENCY:-1,4,16,64}" --grid-sets "" --max-tokens 256 --max-model-len 2048 \
  --engine '{"dtype": "bfloat16"}' --out "${OUT_JSON:-bench/results/bench-gpu.json}" "$@"
