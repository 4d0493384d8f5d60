"""Small-scale ablations in the spirit of the paper's Tables 7, 9 and 13, on the demo target.

    dflash-vllm bench ablations [--steps 500]   # ~25 min on 2 cores

Every variant is trained with the same data (the demo target's own answers to 6,000 task
prompts), seed and step budget, then measured with the reference loop (greedy, 64 held-out
prompts): tau at K = 15, or K = 7 for the 8-block rows. The reference loop is used (not vLLM)
because the input-fusion variant is not a published format vLLM can load.
Writes bench/results/ablations.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from ..options import add_options, opt, parse_into
from ..paths import DEMO_TARGET, results_dir

VARIANTS = {  # name: (work-dir slug, recipe overrides, serving K values)
    "baseline (KV in every layer, random anchors, decayed loss, B=16)": ("baseline", {}, [15, 7]),
    "input-only fusion (target K/V in layer 1 only)": ("input-only", {"inject_every_layer": False}, [15]),
    "fixed block boundaries": ("fixed", {"random_anchors": False}, [15]),
    "uniform loss weights": ("uniform", {"decay": 0.0}, [15]),
    "trained at B=8": ("b8", {"block_size": 8}, [7, 15]),
}


def tau_reference(target, drafter, tok, k: int, n: int = 64) -> float:
    from ..acceptance import tau
    from ..reference import generate
    from ..training.tasks import make_samples
    from ..prompts import chat_ids

    acc = []
    for s in make_samples(n, seed=101):
        ids = chat_ids(tok, s.prompt)
        acc += generate(target, drafter, ids, 160, num_speculative_tokens=k, stop_token_ids=(tok.eos_token_id,)).accepted
    return tau(acc)


@dataclass
class Ablations:
    steps: int = opt(500, "training steps per variant")
    data: str = opt("/tmp/dflash-demo/regen.jsonl", "training data, from deploy/demo/make_demo.sh step 2")
    work: str = opt("/tmp/dflash-ablations", "where the variants are trained (a finished one is reused)")


def main(argv=None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..torch_drafter import DFlashDrafter
    from ..training.trainer import Recipe, train

    ap = argparse.ArgumentParser(prog="dflash-vllm bench ablations", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, Ablations)
    args = parse_into(Ablations, ap.parse_args(argv))
    target_dir = DEMO_TARGET
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    rows = []
    for name, (slug, overrides, ks) in VARIANTS.items():
        out = os.path.join(args.work, slug)  # finished variants are reused, so a stopped run resumes
        recipe = Recipe(**{**dict(block_size=16, num_draft_layers=2, num_anchors=16, batch_size=16, seed=0,
                                  target_layer_ids=[0, 1, 2, 3]), **overrides})
        if not os.path.exists(os.path.join(out, "config.json")):
            record = train(target_dir, args.data, out, recipe, max_steps=args.steps, progress=False, threads=2)
        else:
            record = json.load(open(os.path.join(out, "training_record.json")))
        drafter = DFlashDrafter.from_pretrained(out).eval()  # builds the ablation as recorded in its config
        for k in ks:
            tau = tau_reference(target, drafter, tok, k)
            rows.append({"variant": name, "served_k": k, "tau": round(tau, 3), "steps": record["steps"],
                         "final_loss": record["final_loss_mean_last_50"]})
            print(json.dumps(rows[-1]), flush=True)
    os.makedirs(results_dir(), exist_ok=True)
    with open(os.path.join(results_dir(), "ablations.json"), "w") as f:
        json.dump({"steps_per_variant": args.steps, "rows": rows}, f, indent=1)
    print("\n| variant | served K | tau | final loss |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['served_k']} | {r['tau']:.2f} | {r['final_loss']:.3f} |")
    return 0


if __name__ == "__main__":
    main()
