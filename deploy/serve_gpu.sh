#!/usr/bin/env bash
# Single node, one CUDA GPU: Qwen3-8B with the published DFlash drafter (block 16, K=15).
# Needs `pip install -e ".[cuda]"` (vllm==0.32.0) and the weights reachable from the HF cache/hub.
set -euo pipefail
cd "$(dirname "$0")/.."
exec dflash-vllm serve Qwen/Qwen3-8B \
  --speculative-config "$(cat deploy/configs/qwen3-8b-dflash-b16.json)" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --max-num-seqs "${MAX_NUM_SEQS:-32}" "$@"
