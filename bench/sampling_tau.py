"""tau on the demo pair at temperature 0 and 1, with drafts sampled from q (probabilistic) or
greedy drafts (one-hot q) under a sampled target. Same held-out prompts, K = 15, our add-on.

    .venv/bin/python bench/sampling_tau.py   # writes bench/results/sampling_tau.json
"""

import json
import os

from dflash_vllm.acceptance import histogram, tau
from dflash_vllm.harness import run_job_subprocess
from dflash_vllm.paths import DEMO_DRAFTER, DEMO_TARGET, results_dir


def main():
    from transformers import AutoTokenizer

    from dflash_vllm.bench.prompts import chat_ids
    from dflash_vllm.training.tasks import make_samples

    target, drafter = DEMO_TARGET, DEMO_DRAFTER
    tok = AutoTokenizer.from_pretrained(target)
    prompts = [chat_ids(tok, s.prompt) for s in make_samples(64, seed=101)]
    rows = {}
    for temp, method in [(0.0, "greedy"), (1.0, "probabilistic"), (1.0, "greedy")]:
        spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": 15, "draft_sample_method": method}
        reqs = [{"prompt_token_ids": p, "max_tokens": 160, "temperature": temp, "seed": i, "ignore_eos": False}
                for i, p in enumerate(prompts)]
        out = run_job_subprocess({"model": target, "speculative_config": spec, "requests": reqs,
                                  "engine": {"skip_tokenizer_init": False}})
        acc = [a for o in out["outputs"] for a in o["accepted_per_step"]]
        rows[f"T={temp} drafts={method}"] = {"tau": round(tau(acc), 3), "steps": len(acc), "histogram": histogram(acc, 15)}
        print(f"T={temp} drafts={method}: tau {rows[f'T={temp} drafts={method}']['tau']}", flush=True)
    os.makedirs(results_dir(), exist_ok=True)
    with open(os.path.join(results_dir(), "sampling_tau.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
