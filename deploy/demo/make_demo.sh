#!/usr/bin/env bash
# Rebuild the shipped demo pair from nothing (about an hour on 2 CPU cores):
#   1. the target: Qwen3 architecture, own BPE tokenizer + chat template, trained on the task suite;
#   2. target-aligned data: the target answers 6,000 task prompts itself (through vLLM);
#   3. the DFlash drafter (block 16, 2 layers), trained with the paper's recipe;
#   4. the measurements that go into the model cards.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
WORK=${WORK:-/tmp/dflash-demo}
mkdir -p "$WORK"
$PY -m dflash_vllm.training.target --out deploy/demo/target --minutes 30 --threads 2
$PY - <<'PYEOF'
import json, os
from dflash_vllm.training.tasks import make_samples
work = os.environ.get("WORK", "/tmp/dflash-demo")
with open(f"{work}/train_prompts.jsonl", "w") as f:
    for s in make_samples(6000, seed=2):  # seed 2: not the target's data (0) nor held-out (101)
        f.write(json.dumps({"prompt": s.prompt}) + "\n")
PYEOF
.venv/bin/dflash-vllm regen --target deploy/demo/target --prompts "$WORK/train_prompts.jsonl" \
  --out "$WORK/regen.jsonl" --max-tokens 160
.venv/bin/dflash-vllm train --target deploy/demo/target --data "$WORK/regen.jsonl" --out deploy/demo/drafter \
  --block-size 16 --num-draft-layers 2 --num-anchors 16 --batch-size 16 --epochs 5 --target-layer-ids 0,1,2,3 --threads 2
$PY -m dflash_vllm.training.evaluate --target deploy/demo/target --drafter deploy/demo/drafter --k 15
