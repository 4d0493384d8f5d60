#!/usr/bin/env bash
# Ray on CPU nodes, tensor parallel, the shipped demo pair. vLLM 0.32 refuses the Ray executor on
# its CPU platform; the add-on routes `--distributed-executor-backend ray` on CPU to
# dflash_vllm.fixes.ray_cpu.CpuRayExecutor (one Ray CPU reserved per rank, gloo between ranks).
#   head node:    .venv/bin/ray start --head --port=6379
#   other nodes:  .venv/bin/ray start --address=HEAD_IP:6379
#   then, on the head node (without a running cluster, vLLM starts a local one):
set -euo pipefail
cd "$(dirname "$0")/.."
TP=${TP:-2}
# Cores for each local rank, '|'-separated (the CPU backend pins each rank's OpenMP threads).
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0|1}
exec .venv/bin/dflash-vllm serve deploy/demo/target \
  --speculative-config "$(cat deploy/configs/demo.json)" \
  --distributed-executor-backend ray --tensor-parallel-size "$TP" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --served-model-name demo \
  --dtype float32 --max-model-len 1024 --kv-cache-memory-bytes 268435456 --enforce-eager "$@"
