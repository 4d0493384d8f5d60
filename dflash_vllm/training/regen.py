"""Target-aligned training data: the target answers the prompts itself, through vLLM, in batches.

Prompts come from a ``.jsonl`` file (``{"prompt": ...}`` or ``{"messages": [...]}`` per line)
or a text file (one prompt per line). Chat templates are applied when the tokenizer has one.
Writes jsonl ``{"prompt_ids": [...], "response_ids": [...]}`` for `dflash-vllm train`, in
chunks of ``--chunk`` prompts appended as they finish: a stopped run resumes after the last
complete chunk (the lines already written are kept, in prompt order).
The only vLLM import in `dflash_vllm.training`.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from ..options import add_options, opt, parse_into


def regenerate(target: str, prompts: list, out: str, max_tokens: int = 256, temperature: float = 0.0,
               seed: int = 0, chunk: int = 256, **llm_kwargs) -> int:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ..prompts import chat_ids

    tok = AutoTokenizer.from_pretrained(target)
    ids = [chat_ids(tok, p) for p in prompts]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    done = 0
    if os.path.exists(out):  # resume: keep complete lines, drop a torn last one
        with open(out) as f:
            lines = [x for x in f.read().split("\n") if x.strip()]
        good = []
        for x in lines:
            try:
                good.append(json.loads(x)["prompt_ids"])
            except (ValueError, KeyError):
                break
        if good != ids[: len(good)]:
            raise SystemExit(f"dflash-vllm regen: error: {out} holds responses to other prompts; pass a new --out")
        done = len(good)
        with open(out, "w") as f:
            f.writelines(x + "\n" for x in lines[:done])
    if done >= len(ids):
        return len(ids)
    llm_kwargs.setdefault("gpu_memory_utilization", 0.3)
    llm_kwargs.setdefault("dtype", "float32")
    llm = LLM(model=target, seed=seed, **llm_kwargs)
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed if temperature > 0 else None)
    for start in range(done, len(ids), chunk):
        part = ids[start : start + chunk]
        outs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in part], params)
        with open(out, "a") as f:
            for x, o in zip(part, outs):
                f.write(json.dumps({"prompt_ids": x, "response_ids": list(o.outputs[0].token_ids)}) + "\n")
    return len(ids)


@dataclass
class RegenJob:
    """One `dflash-vllm regen` run; every field is an option."""

    target: str = opt(help="HF target model directory", required=True)
    prompts: str = opt(help=".jsonl ({prompt} or {messages} per line) or a text file, one prompt per line", required=True)
    out: str = opt(help="output jsonl (prompt_ids, response_ids); a rerun resumes after its last complete chunk",
                   required=True)
    max_tokens: int = opt(256, "answer length cap")
    temperature: float = opt(0.0, "0: greedy (the target's own argmax answers)")
    seed: int = opt(0, "sampling seed (temperature > 0)")
    max_model_len: int = opt(2048, "vLLM max_model_len")
    chunk: int = opt(256, "prompts per chunk written (resume granularity)")
    enforce_eager: bool = opt(False, "skip torch.compile (start-up minutes on CPU; small jobs)")


def main(argv=None):
    from ..prompts import read_conversations

    ap = argparse.ArgumentParser(prog="dflash-vllm regen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, RegenJob)
    job = parse_into(RegenJob, ap.parse_args(argv))
    n = regenerate(job.target, read_conversations(job.prompts), job.out, job.max_tokens, job.temperature, job.seed,
                   chunk=job.chunk, max_model_len=job.max_model_len, enforce_eager=job.enforce_eager)
    print(f"wrote {n} target responses to {job.out}")


if __name__ == "__main__":
    main()
