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
$PY -m dflash_vllm.cli make-target --out deploy/demo/target --minutes 30 --threads 2
# seed 2: not the target's data (0) nor the held-out prompts (101)
.venv/bin/dflash-vllm prompts --set task-suite --n 6000 --seed 2 --out "$WORK/train_prompts.jsonl"
.venv/bin/dflash-vllm regen --target deploy/demo/target --prompts "$WORK/train_prompts.jsonl" \
  --out "$WORK/regen.jsonl" --max-tokens 160
.venv/bin/dflash-vllm train --target deploy/demo/target --data "$WORK/regen.jsonl" --out deploy/demo/drafter \
  --block-size 16 --num-draft-layers 2 --num-anchors 16 --batch-size 16 --epochs 5 --target-layer-ids 0,1,2,3 --threads 2
$PY -m dflash_vllm.cli evaluate --target deploy/demo/target --drafter deploy/demo/drafter --k 15
