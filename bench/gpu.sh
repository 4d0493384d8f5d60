#!/usr/bin/env bash
# The GPU validation run, on one CUDA GPU (e.g. a lent H200), in under 10 minutes, unchanged:
#   1. small models made on the spot (dflash_vllm/tiny.py): a Qwen3-architecture target, a drafter
#      trained briefly on its outputs, and a deliberately poor drafter for the sampling check;
#   2. which runner/proposer/drafter each engine built (by type, via collective_rpc): ours under
#      Model Runner V1 by default; vLLM's V2 DFlashSpeculator when V2 is forced (hand-over, no crash);
#   3. the greedy lossless workload (waves, prefix caching, chunked prefill, preemption): ours and
#      the forced-V2 hand-over token-identical to no speculation (fp32);
#   4. a short exactness check of speculative sampling (G-test against the target's exact law);
#   5. none / ours / native (vLLM's own, Model Runner V2) at concurrency 1, 8, 32 (bf16, CUDA graphs).
# Writes $OUT_JSON (default bench/results/gpu-check.json); exit status 1 if a check failed.
# Needs a CUDA Python environment with vLLM 0.32 and this package: pip install -e ".[cuda,test]".
#   bench/gpu.sh                          # everything
#   ONLY=lossless,sampling bench/gpu.sh   # a subset (lossless, sampling, sweep)
#   DEMO_SWEEP=1 bench/gpu.sh             # then also `dflash-vllm bench` on the demo pair (tokenizer-based prompts)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then  # the python that has vLLM: $PY, else python, else .venv/bin/python
  PY=python
  if ! python -c "import vllm" >/dev/null 2>&1 && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
fi
export PYTHONUNBUFFERED=1
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device visible')"
status=0
timeout "${TIMEOUT_S:-570}" "$PY" -m dflash_vllm.gpu_check --out "${OUT_JSON:-bench/results/gpu-check.json}" \
  --only "${ONLY:-lossless,sampling,sweep}" --concurrency "${CONCURRENCY:-1,8,32}" \
  ${MODELS_DIR:+--models "$MODELS_DIR"} "$@" || status=$?
if [ "${DEMO_SWEEP:-0}" = 1 ]; then
  "$PY" -m dflash_vllm.cli bench \
    --target "${TARGET:-deploy/demo/target}" --drafter "${DRAFTER:-deploy/demo/drafter}" --methods none,ours,native \
    --concurrency "${CONCURRENCY:-1,8,32}" --grid-sets "" --max-tokens 256 --max-model-len 2048 \
    --engine '{"dtype": "bfloat16"}' --out "${DEMO_OUT_JSON:-bench/results/bench-gpu.json}" || status=$?
fi
exit $status
