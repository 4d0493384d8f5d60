"""Measure a demo pair through vLLM: target quality on held-out task prompts, and the drafter's
mean acceptance length tau (greedy, our add-on) on prompts it was not trained on.

    python -m dflash_vllm.training.evaluate --target deploy/demo/target [--drafter deploy/demo/drafter]

Held-out prompts use task seed 101 (the target trained on seed 0, the drafter's prompts seed 2).
"""

from __future__ import annotations

import argparse
import json

from ..acceptance import histogram, tau
from .tasks import distinct_ngram_ratio, loop_fraction, make_samples


def evaluate(target: str, drafter: str | None, num_prompts: int = 64, k: int = 15, max_tokens: int = 160,
             native: bool = False, max_num_seqs: int = 32) -> dict:
    from transformers import AutoTokenizer

    from ..prompts import chat_ids
    from ..harness import run_job_subprocess

    tok = AutoTokenizer.from_pretrained(target)
    samples = make_samples(num_prompts, seed=101)
    ids = [chat_ids(tok, s.prompt)
           for s in samples]
    reqs = [{"prompt_token_ids": x, "max_tokens": max_tokens, "ignore_eos": False} for x in ids]
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": k} if drafter else None
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter")
    ap.add_argument("--k", type=int, default=15)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--max-num-seqs", type=int, default=32, help="1 = batch 1")
    args = ap.parse_args(argv)
    r = evaluate(args.target, args.drafter, args.num_prompts, args.k, native=args.native, max_num_seqs=args.max_num_seqs)
    r.pop("per_request_outputs")
    r.pop("accepted_per_request", None)
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
