"""Target-aligned training data: the target answers the prompts itself, through vLLM, in batches
(or, with ``--engine hf`` on a machine without vLLM, such as a GPU training box, through
`transformers`: `hf_generate.py`).

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
import time
from dataclasses import dataclass

from ..options import add_options, opt, parse_into


def _resume(out: str, ids: list[list[int]]) -> int:
    """How many answers `out` already holds for `ids` (complete lines, in prompt order; a torn
    last line is dropped); refuses a file that answers other prompts."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if not os.path.exists(out):
        return 0
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
    with open(out, "w") as f:
        f.writelines(x + "\n" for x in lines[: len(good)])
    return len(good)


def _append(out: str, part: list[list[int]], answers: list[list[int]]) -> None:
    with open(out, "a") as f:
        for x, a in zip(part, answers):
            f.write(json.dumps({"prompt_ids": x, "response_ids": a}) + "\n")


def regenerate(target: str, prompts: list, out: str, max_tokens: int = 256, temperature: float = 0.0,
               seed: int = 0, chunk: int = 256, **llm_kwargs) -> int:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ..prompts import chat_ids

    tok = AutoTokenizer.from_pretrained(target)
    ids = [chat_ids(tok, p) for p in prompts]
    done = _resume(out, ids)
    if done >= len(ids):
        return len(ids)
    llm_kwargs.setdefault("gpu_memory_utilization", 0.3)
    llm_kwargs.setdefault("dtype", "float32")
    llm = LLM(model=target, seed=seed, **llm_kwargs)
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed if temperature > 0 else None)
    for start in range(done, len(ids), chunk):
        part = ids[start : start + chunk]
        outs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in part], params)
        _append(out, part, [list(o.outputs[0].token_ids) for o in outs])
    return len(ids)


def regenerate_hf(target: str, prompts: list, out: str, max_tokens: int = 256, temperature: float = 0.0,
                  seed: int = 0, chunk: int = 1024, device: str = "cuda", batch_size: int = 256,
                  time_budget_s: float = 0.0) -> int:
    """`regenerate` through `transformers` (no vLLM: see `hf_generate`), fp32 with TF32 off.
    With `time_budget_s`, no chunk starts once that much generation time has passed: the file then holds a prefix of the
    answers (a rerun goes on from there). Returns how many answers the file holds."""
    from ..prompts import chat_ids
    from .hf_generate import end_ids, generate, load_target, pad_id, torch_tf32

    torch_tf32(False)
    model, tok = load_target(target, device)
    t0 = time.time()  # the budget is generation time: loading is not in it
    ids = [chat_ids(tok, p) for p in prompts]
    done = _resume(out, ids)
    open(out, "a").close()  # the file exists even when the budget allows no chunk
    eos = end_ids(tok, model)
    pad = pad_id(tok, eos)
    for start in range(done, len(ids), chunk):
        if time_budget_s and time.time() - t0 > time_budget_s:
            break
        part = ids[start : start + chunk]
        answers = generate(model, part, max_tokens, eos, pad, batch_size, temperature, seed=seed + start)
        _append(out, part, answers)
        done = start + len(part)
    return done


def compare(answers_path: str, reference_path: str) -> dict:
    """Greedy answers from two engines to the same prompts: how many are identical, and where the
    others first differ (token index), over the prompts both files answer."""
    def read(p):
        with open(p) as f:
            return {tuple(r["prompt_ids"]): r["response_ids"] for r in map(json.loads, filter(str.strip, f))}

    a, b = read(answers_path), read(reference_path)
    both = [k for k in a if k in b]
    firsts = []
    for k in both:
        x, y = a[k], b[k]
        d = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None)
        if d is None and len(x) != len(y):
            d = min(len(x), len(y))
        if d is not None:
            firsts.append(d)
    firsts.sort()
    return {"prompts": len(both), "identical": len(both) - len(firsts),
            "first_difference_median": firsts[len(firsts) // 2] if firsts else None,
            "tokens_compared": sum(min(len(a[k]), len(b[k])) for k in both)}


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
    engine: str = opt("vllm", "vllm, or hf: transformers' generate (fp32, TF32 off) where vLLM is not installed",
                      choices=["vllm", "hf"])
    device: str = opt("cuda", "hf engine: torch device")
    batch_size: int = opt(256, "hf engine: prompts per generate call (longest first)")
    time_budget_s: float = opt(0.0, "hf engine: start no chunk after this many seconds (0: no limit)")
    compare_to: str | None = opt(None, "afterwards, compare the answers with another engine's regen file "
                                 "for the same prompts (identical answers, first differing token)")


def main(argv=None):
    from ..prompts import read_conversations

    ap = argparse.ArgumentParser(prog="dflash-vllm regen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, RegenJob)
    job = parse_into(RegenJob, ap.parse_args(argv))
    convs = read_conversations(job.prompts)
    if job.engine == "hf":
        n = regenerate_hf(job.target, convs, job.out, job.max_tokens, job.temperature, job.seed,
                          chunk=job.chunk, device=job.device, batch_size=job.batch_size,
                          time_budget_s=job.time_budget_s)
    else:
        n = regenerate(job.target, convs, job.out, job.max_tokens, job.temperature, job.seed,
                       chunk=job.chunk, max_model_len=job.max_model_len, enforce_eager=job.enforce_eager)
    print(f"wrote {n} of {len(convs)} target responses to {job.out}")
    if job.compare_to:
        print("compared with " + job.compare_to + ": " + json.dumps(compare(job.out, job.compare_to)))


if __name__ == "__main__":
    main()
