"""tau on the demo pair at temperature 0 and 1, with drafts sampled from q (probabilistic) or
greedy drafts (one-hot q) under a sampled target. Same held-out prompts, K = 15, our add-on.

    dflash-vllm bench sampling-tau   # writes bench/results/sampling_tau.json (~10 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os

from ..acceptance import histogram, tau
from ..harness import run_job_subprocess
from ..paths import DEMO_DRAFTER, DEMO_TARGET, results_dir


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="dflash-vllm bench sampling-tau", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    from transformers import AutoTokenizer

    from ..training.tasks import make_samples
    from ..prompts import chat_ids

    target, drafter = DEMO_TARGET, DEMO_DRAFTER
    tok = AutoTokenizer.from_pretrained(target)
    prompts = [chat_ids(tok, s.prompt) for s in make_samples(64, seed=101)]
    rows = {}
    for temp, method in [(0.0, "greedy"), (1.0, "probabilistic"), (1.0, "greedy")]:
        spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": 15, "draft_sample_method": method,
                "dflash_adaptive": False}
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
    return 0


if __name__ == "__main__":
    main()
