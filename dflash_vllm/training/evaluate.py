"""Measure a demo pair through vLLM: target quality on held-out task prompts, and the drafter's
mean acceptance length tau (greedy, our add-on) on prompts it was not trained on.

    dflash-vllm evaluate --target deploy/demo/target [--drafter deploy/demo/drafter]

Held-out prompts use task seed 101 (the target trained on seed 0, the drafter's prompts seed 2).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ..acceptance import histogram, tau
from ..options import add_options, opt, parse_into
from .tasks import distinct_ngram_ratio, loop_fraction, make_samples


def evaluate(target: str, drafter: str | None, num_prompts: int = 64, k: int = 15, max_tokens: int = 160,
             native: bool = False, max_num_seqs: int = 32) -> dict:
    from transformers import AutoTokenizer

    from ..prompts import chat_ids
    from ..harness import run_job_subprocess

    tok = AutoTokenizer.from_pretrained(target)
    samples = make_samples(num_prompts, seed=101)
    ids = [chat_ids(tok, s.prompt) for s in samples]
    reqs = [{"prompt_token_ids": x, "max_tokens": max_tokens, "ignore_eos": False} for x in ids]
    spec = ({"method": "dflash", "model": drafter, "num_speculative_tokens": k, "dflash_adaptive": False}  # tau at K
            if drafter else None)
    out = run_job_subprocess({"model": target, "speculative_config": spec, "native": native, "requests": reqs,
                              "engine": {"skip_tokenizer_init": False, "max_num_seqs": max_num_seqs}})
    outs = [o["token_ids"] for o in out["outputs"]]
    texts = [tok.decode(o, skip_special_tokens=True) for o in outs]
    report = {
        "num_prompts": num_prompts,
        "task_accuracy": sum(s.answer in t for s, t in zip(samples, texts)) / num_prompts,
        "loop_fraction": sum(loop_fraction(o) for o in outs) / num_prompts,
        "distinct_4gram_ratio": round(distinct_ngram_ratio(outs, 4), 4),
        "finished_with_eos": sum(o["finish_reason"] == "stop" for o in out["outputs"]) / num_prompts,
        "mean_output_tokens": sum(map(len, outs)) / num_prompts,
    }
    if drafter:
        accepted = [a for o in out["outputs"] for a in o["accepted_per_step"]]
        report.update(k=k, tau=round(tau(accepted, empty=1.0), 3), accept_histogram=histogram(accepted, k),
                      accepted_per_request=[o["accepted_per_step"] for o in out["outputs"]])
    report["per_request_outputs"] = outs
    return report


@dataclass
class EvaluateJob:
    """One `dflash-vllm evaluate` run."""

    target: str = opt(help="the demo-suite target directory", required=True)
    drafter: str | None = opt(None, "a DFlash drafter for it (unset: the target alone)")
    k: int = opt(15, "drafts per step (num_speculative_tokens)")
    num_prompts: int = opt(64, "held-out task prompts (seed 101)")
    native: bool = opt(False, "vLLM's built-in DFlash instead of this add-on, same weights")
    max_num_seqs: int = opt(32, "vLLM max_num_seqs (1: batch 1)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, EvaluateJob)
    job = parse_into(EvaluateJob, ap.parse_args(argv))
    r = evaluate(job.target, job.drafter, job.num_prompts, job.k, native=job.native, max_num_seqs=job.max_num_seqs)
    r.pop("per_request_outputs")
    r.pop("accepted_per_request", None)
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
