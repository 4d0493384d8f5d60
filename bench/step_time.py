"""Engine step time of our DFlash vs vLLM's native DFlash on the same weights, side by side.

    .venv/bin/python bench/step_time.py [--target deploy/demo/target --drafter deploy/demo/drafter]

Each method runs the same greedy workload at batch 1 and batch 16 in its own fresh engine;
runs are interleaved (ours, native, native, ours) so machine drift hits both alike. Reported
per cell: median engine step time, output tokens/s, tau, and where a step's time goes
(target forward / drafting / sampling+rejection+bookkeeping), from timers around vLLM's
model-runner methods. Ratios (ours / native) come from the same run. Writes JSON to
bench/results/step_time.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from dflash_vllm.acceptance import tau
from dflash_vllm.bench.runner import provenance
from dflash_vllm.harness import run_job_subprocess
from dflash_vllm.paths import DEMO_DRAFTER, DEMO_TARGET, results_dir


def workload(target: str, batch: int, num_requests: int, max_tokens: int) -> list[dict]:
    from transformers import AutoTokenizer

    from dflash_vllm.training.tasks import make_samples

    tok = AutoTokenizer.from_pretrained(target)
    reqs = []
    for s in make_samples(num_requests, seed=303):
        ids = tok.apply_chat_template([{"role": "user", "content": s.prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        reqs.append({"prompt_token_ids": list(ids), "max_tokens": max_tokens, "ignore_eos": False})
    return reqs


def summarize(out: dict, k: int) -> dict:
    steps = out["steps"]
    decode = [s for s in steps if s["new_tokens"] > 0]
    secs = sum(s["seconds"] for s in steps)
    tokens = sum(s["new_tokens"] for s in steps)
    accepted = [a for o in out["outputs"] for a in (o["accepted_per_step"] or [])]
    split = {key: sum(s.get(key, 0.0) for s in steps) / max(1, len(steps)) for key in ("verify_s", "draft_s", "sample_and_draft_s")}
    step_ms = statistics.median(s["seconds"] for s in decode) * 1e3
    return {
        "median_step_ms": round(step_ms, 3),
        "output_tokens_per_s": round(tokens / secs, 1),
        "tau": round(tau(accepted, empty=1.0), 3),
        "num_steps": len(steps),
        "mean_step_split_ms": {
            "target_forward": round(split["verify_s"] * 1e3, 3),
            "draft": round(split["draft_s"] * 1e3, 3),
            "sampling_rejection_bookkeeping": round((split["sample_and_draft_s"] - split["draft_s"]) * 1e3, 3),
        },
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEMO_TARGET)
    ap.add_argument("--drafter", default=DEMO_DRAFTER)
    ap.add_argument("--k", type=int, default=15)
    ap.add_argument("--batch-sizes", default="1,16")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", default=os.path.join(results_dir(), "step_time.json"))
    args = ap.parse_args(argv)
    spec = {"method": "dflash", "model": args.drafter, "num_speculative_tokens": args.k}
    cells = {}
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        reqs = workload(args.target, b, 4 if b == 1 else b, args.max_tokens)
        job = {"model": args.target, "speculative_config": spec, "requests": reqs, "profile": True,
               "engine": {"max_num_seqs": b, "skip_tokenizer_init": False}}
        runs = {"ours": [], "native": []}
        for name in ("ours", "native", "native", "ours"):
            out = run_job_subprocess(dict(job, native=name == "native"))
            runs[name].append(summarize(out, args.k))
            print(f"batch {b} {name}: {runs[name][-1]}", flush=True)
        cell = {}
        for name, rs in runs.items():
            cell[name] = {
                "median_step_ms": statistics.mean(r["median_step_ms"] for r in rs),
                "output_tokens_per_s": statistics.mean(r["output_tokens_per_s"] for r in rs),
                "tau": rs[0]["tau"],
                "mean_step_split_ms": {k2: statistics.mean(r["mean_step_split_ms"][k2] for r in rs) for k2 in rs[0]["mean_step_split_ms"]},
                "runs": rs,
            }
        cell["ratio_ours_over_native"] = {
            "median_step_time": round(cell["ours"]["median_step_ms"] / cell["native"]["median_step_ms"], 3),
            "output_tokens_per_s": round(cell["ours"]["output_tokens_per_s"] / cell["native"]["output_tokens_per_s"], 3),
            "draft_time": round(cell["ours"]["mean_step_split_ms"]["draft"] / max(1e-9, cell["native"]["mean_step_split_ms"]["draft"]), 3),
        }
        cells[f"batch_{b}"] = cell
    result = {
        "what": "engine step time, ours vs vLLM native DFlash, same weights, greedy",
        "config": {"target": args.target, "drafter": args.drafter, "k": args.k, "max_tokens": args.max_tokens},
        "provenance": provenance(),
        "cells": cells,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("\n| batch | method | median step ms | tok/s | tau | target fwd ms | draft ms | sample/reject/other ms |")
    print("|---|---|---|---|---|---|---|---|")
    for cname, cell in cells.items():
        for name in ("ours", "native"):
            c = cell[name]
            s = c["mean_step_split_ms"]
            print(f"| {cname[6:]} | {name} | {c['median_step_ms']:.2f} | {c['output_tokens_per_s']:.1f} | {c['tau']:.2f} | "
                  f"{s['target_forward']:.2f} | {s['draft']:.2f} | {s['sampling_rejection_bookkeeping']:.2f} |")
        print(f"| {cname[6:]} | ours/native | {cell['ratio_ours_over_native']['median_step_time']:.3f} | "
              f"{cell['ratio_ours_over_native']['output_tokens_per_s']:.3f} | | | {cell['ratio_ours_over_native']['draft_time']:.3f} | |")


if __name__ == "__main__":
    main()
