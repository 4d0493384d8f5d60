#!/usr/bin/env bash
# Ray cluster of GPU nodes, tensor parallel (CPU nodes: serve_ray_cpu.sh): the drafter is built from vLLM's parallel layers and is sharded
# the same way as the target (heads split over TP ranks; fc, norms replicated).
#   head node:    ray start --head --port=6379
#   each worker:  ray start --address=HEAD_IP:6379
#   then, on the head node:
set -euo pipefail
TP=${TP:-2}
exec dflash-vllm serve Qwen/Qwen3-8B \
  --speculative-config "$(cat "$(dirname "$0")/configs/qwen3-8b-dflash-b16.json")" \
  --distributed-executor-backend ray --tensor-parallel-size "$TP" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" "$@"
