"""The GPU validation run behind ``bench/gpu.sh`` and ``tests/gpu/``: one CUDA device, small
models made on the spot, one JSON.

Checks (each engine in its own process, one at a time; which DFlash ran is read from the
objects the engine built, through ``collective_rpc``, never from a log line):

- ``runner_choice``: the add-on's default engine runs Model Runner V1 with our proposer and
  drafter; with ``VLLM_USE_V2_MODEL_RUNNER=1`` forced, the engine still starts and vLLM's V2
  ``DFlashSpeculator`` runs on vLLM's drafter class (the hand-over); ``DFLASH_VLLM_NATIVE=1``
  runs vLLM's V2 DFlash.
- ``greedy_lossless``: a workload with waves of arrivals, shared prefixes under prefix caching,
  chunked prefill and a KV cache small enough to preempt: greedy outputs of ours and of the
  forced-V2 hand-over are token-identical to no speculation (fp32).
- ``sampling_exact``: the law of the first three sampled tokens with our DFlash against the
  target's exact law (G-test per position, Bonferroni, alpha 0.01), on a deliberately poor drafter.
- ``sweep``: none / ours / native (V2) at concurrency 1, 8, 32 (bf16, CUDA graphs on): output
  tokens/s, speed-up over none, tau.

``python -m dflash_vllm.gpu_check --out FILE.json`` (exit 1 if a check fails); ``--smoke``
shrinks every size (it also runs on CPU, where only V1 exists, to test the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from . import envs
from .acceptance import tau_from_counters
from .options import add_options, opt, parse_into

V1_RUNNER = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
V2_RUNNER = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
OUR_PROPOSER = "dflash_vllm.proposers.dflash.DFlashProposer"
OUR_DRAFTER = "dflash_vllm.models.drafter.DFlashDrafterModel"
V2_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.dflash.speculator.DFlashSpeculator"
VLLM_DRAFTER = "vllm.model_executor.models.qwen3_dflash.DFlashQwen3ForCausalLM"
ALPHA = 0.01


# -- one engine, in this process (the worker side) ---------------------------------------------
def _engine_main(job_path: str, out_path: str) -> None:
    from vllm import LLM

    from .driver import count_preemptions, drive
    from .runner_choice import describe_spec_decode

    with open(job_path) as f:
        job = json.load(f)
    engine_kwargs = dict(dtype="float32", gpu_memory_utilization=0.25, max_model_len=1024, enforce_eager=True, seed=0,
                         skip_tokenizer_init=True, max_num_seqs=32, disable_log_stats=True)
    engine_kwargs.update(job.get("engine", {}))
    spec = job.get("speculative_config")
    if spec:
        engine_kwargs["per_request_spec_decode_metrics"] = "detailed"
    t0 = time.perf_counter()
    llm = LLM(model=job["model"], speculative_config=spec, **engine_kwargs)
    out = {"startup_s": time.perf_counter() - t0, "built": llm.collective_rpc(describe_spec_decode), "phases": []}
    engine = llm.llm_engine
    counter = count_preemptions(engine)
    for phase in job["phases"]:
        run = drive(engine, phase["requests"], concurrency=phase.get("concurrency"), id_prefix=f"{phase['name']}-",
                    max_steps=200_000)  # closed loop when the phase names a concurrency
        outputs = [{"token_ids": o["token_ids"], "finish_reason": o["finish_reason"],
                    "accepted": sum(o["accepted_per_step"]) if spec else None,
                    "verify_steps": len(o["accepted_per_step"]) if spec else None} for o in run["outputs"]]
        out["phases"].append({"name": phase["name"], "seconds": run["wall_s"],
                              "output_tokens": sum(len(o["token_ids"]) for o in outputs),
                              "outputs": outputs if phase.get("keep_outputs", True) else None,
                              "accepted": sum(o["accepted"] or 0 for o in outputs),
                              "verify_steps": sum(o["verify_steps"] or 0 for o in outputs)})
    out["num_preemptions"] = counter[0] if counter is not None else None
    engine.engine_core.shutdown()
    with open(out_path, "w") as f:
        json.dump(out, f)


def run_engine(job: dict, env: dict | None = None, timeout: float = 900) -> dict:
    """Run ``job`` in a fresh process. env: e.g. {"DFLASH_VLLM_NATIVE": "1"} or
    {"VLLM_USE_V2_MODEL_RUNNER": "1"}; the add-on is active unless DFLASH_VLLM_NATIVE says otherwise."""
    with tempfile.TemporaryDirectory() as d:
        job_path, out_path = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        full_env = dict(os.environ)
        full_env.setdefault(envs.NATIVE.name, "0")
        full_env.pop("VLLM_USE_V2_MODEL_RUNNER", None)  # vLLM decides unless the job forces it
        full_env.update(env or {})
        full_env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: counters, rpc
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dflash_vllm.gpu_check", "--engine-job", job_path, out_path],
                              env=full_env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out_path):
            text = proc.stdout + proc.stderr
            first = text.find("Traceback")
            raise RuntimeError(f"engine job failed (exit {proc.returncode}):\n"
                               f"{text[first:first + 4000] if first >= 0 else ''}\n...\n{text[-3000:]}")
        with open(out_path) as f:
            out = json.load(f)
        out["wall_s"] = time.perf_counter() - t0
        log = proc.stdout + proc.stderr
        out["log_lines"] = [l for l in log.splitlines() if "dflash-vllm" in l][:20]
        return out


# -- models made on the spot ----------------------------------------------------------------------
def make_models(root: str, smoke: bool = False) -> dict:
    from safetensors.torch import load_file, save_file

    from .tiny import make_tiny_drafter, make_tiny_target, make_trained_tiny_drafter

    os.makedirs(root, exist_ok=True)
    target = make_tiny_target(os.path.join(root, "target"))
    drafter = make_trained_tiny_drafter(target, os.path.join(root, "drafter_trained"), steps=60 if smoke else 300)
    small = os.path.join(root, "small")
    if not os.path.exists(os.path.join(small, "drafter", "config.json")):
        make_tiny_target(os.path.join(small, "target"), vocab_size=64, hidden_size=64, num_layers=2, num_heads=2,
                         num_kv_heads=1, head_dim=32, init_std=0.12, seed=3)
        make_tiny_drafter(os.path.join(small, "drafter"), os.path.join(small, "target"), target_layer_ids=[0, 1])
        w = load_file(os.path.join(small, "drafter", "model.safetensors"))
        w["norm.weight"].zero_()  # uniform q: most drafts rejected, the residual path carries the law
        save_file(w, os.path.join(small, "drafter", "model.safetensors"))
    return {"target": target, "drafter": drafter, "small_target": os.path.join(small, "target"),
            "small_drafter": os.path.join(small, "drafter")}


# -- the checks -------------------------------------------------------------------------------------
def _type_check(built: list[dict], runner: str | None, proposer: str, drafter: str) -> list[str]:
    errors = []
    for b in built:
        if runner is not None and b["runner"] != runner:
            errors.append(f"runner {b['runner']} != {runner}")
        if b["proposer"] != proposer:
            errors.append(f"proposer {b['proposer']} != {proposer}")
        if b["drafter_model"] != drafter:
            errors.append(f"drafter model {b['drafter_model']} != {drafter}")
    return errors


def lossless_workload(n: int = 64, seed: int = 1234) -> list[dict]:
    r = random.Random(seed)
    shared = [r.randrange(3, 510) for _ in range(96)]  # a common system-prompt-like prefix
    reqs = []
    for i in range(n):
        length = 1 + (i * 399) // (n - 1)
        body = [r.randrange(3, 510) for _ in range(length)]
        prompt = (shared + body)[:length] if i % 2 and length > 96 else body
        reqs.append({"prompt_token_ids": prompt, "max_tokens": 1 + (i * 37) % 300, "arrive_step": (i % 8) * 4})
    return reqs


LOSSLESS_ENGINE = {"max_num_batched_tokens": 128, "enable_prefix_caching": True, "enable_chunked_prefill": True,
                   "block_size": 32, "num_gpu_blocks_override": 48, "max_num_seqs": 16, "max_model_len": 1024}


def check_runner_and_lossless(models: dict, on_cuda: bool, smoke: bool = False) -> dict:
    reqs = lossless_workload(16 if smoke else 64)
    spec = {"method": "dflash", "model": models["drafter"], "num_speculative_tokens": 7}
    job = {"model": models["target"], "engine": LOSSLESS_ENGINE, "phases": [{"name": "lossless", "requests": reqs}]}
    runs = {"none": run_engine(dict(job, speculative_config=None)),
            "ours": run_engine(dict(job, speculative_config=spec))}
    if on_cuda:
        runs["forced_v2"] = run_engine(dict(job, speculative_config=spec), env={"VLLM_USE_V2_MODEL_RUNNER": "1"})
    base = runs["none"]["phases"][0]["outputs"]
    result = {"runner_choice": {"errors": []}, "greedy_lossless": {"errors": []}}
    rc, gl = result["runner_choice"]["errors"], result["greedy_lossless"]["errors"]
    rc += _type_check(runs["ours"]["built"], V1_RUNNER if on_cuda else None, OUR_PROPOSER, OUR_DRAFTER)
    if on_cuda:
        rc += [f"forced V2: {e}" for e in _type_check(runs["forced_v2"]["built"], V2_RUNNER, V2_SPECULATOR, VLLM_DRAFTER)]
    for name, run in runs.items():
        if name == "none":
            continue
        outs = run["phases"][0]["outputs"]
        diff = [i for i, (a, b) in enumerate(zip(outs, base)) if a["token_ids"] != b["token_ids"]]
        if diff:
            gl.append(f"{name}: {len(diff)} of {len(base)} requests differ from no speculation (first: {diff[0]})")
        if not run["phases"][0]["accepted"]:
            gl.append(f"{name}: no draft was ever accepted")
    if not runs["ours"]["num_preemptions"]:
        gl.append("the KV cache never forced a preemption")
    for name, run in runs.items():
        result["runner_choice"][name] = {"built": run["built"], "startup_s": run["startup_s"], "log": run["log_lines"]}
        result["greedy_lossless"][name] = {"accepted": run["phases"][0]["accepted"],
                                           "verify_steps": run["phases"][0]["verify_steps"],
                                           "num_preemptions": run["num_preemptions"], "seconds": run["phases"][0]["seconds"]}
    for v in result.values():
        v["ok"] = not v["errors"]
    return result


def _g_test_pvalue(counts, probs) -> float:
    import numpy as np
    import torch

    support = probs > 0
    if counts[~support].sum() > 0:
        return 0.0
    expected = counts.sum() * probs[support]
    obs = counts[support]
    g = 2.0 * float(np.sum(np.where(obs > 0, obs * np.log(np.maximum(obs, 1) / expected), 0.0)))
    df = int(support.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(g / 2, dtype=torch.float64)))


def check_sampling_exact(models: dict, smoke: bool = False) -> dict:
    """Temperature 1.0, top-p 0.9, top-k 20: positions 1..3 against the exact marginals."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from .reference import sampling_probs

    prompt, cfg = [5, 17, 33, 2, 41, 9], {"temperature": 1.0, "top_p": 0.9, "top_k": 20}
    target = AutoModelForCausalLM.from_pretrained(models["small_target"], dtype=torch.float32).eval()
    v = target.config.vocab_size
    law = lambda logits: sampling_probs(logits, cfg["temperature"], cfg["top_p"], cfg["top_k"]).double()  # noqa: E731
    with torch.no_grad():
        l1 = target(torch.tensor([prompt])).logits[0, -1]
        l2 = target(torch.cat([torch.tensor(prompt).expand(v, -1), torch.arange(v)[:, None]], 1)).logits[:, -1]
        y12 = torch.cartesian_prod(torch.arange(v), torch.arange(v))
        l3 = target(torch.cat([torch.tensor(prompt).expand(v * v, -1), y12], 1)).logits[:, -1]
    p1, p2, p3 = law(l1), law(l2), law(l3)
    joint = p1[:, None] * p2
    marginals = [p1.numpy(), joint.sum(0).numpy(), (joint.reshape(-1, 1) * p3).sum(0).numpy()]
    n = 600 if smoke else 6000
    spec = {"method": "dflash", "model": models["small_drafter"], "num_speculative_tokens": 3,
            "draft_sample_method": "probabilistic"}
    run = run_engine({"model": models["small_target"], "speculative_config": spec,
                      "engine": {"max_num_seqs": 256, "max_model_len": 64},
                      "phases": [{"name": "sample", "requests": [{"prompt_token_ids": prompt, "max_tokens": 3, **cfg}] * n}]})
    toks = np.array([o["token_ids"] for o in run["phases"][0]["outputs"]])
    pvals = [_g_test_pvalue(np.bincount(toks[:, i], minlength=v), marginals[i]) for i in range(3)]
    errors = []
    if min(pvals) < ALPHA / 3:
        errors.append(f"output law differs from the target's: p-values {pvals} (alpha {ALPHA}/3)")
    if not run["phases"][0]["accepted"]:
        errors.append("no draft was ever accepted: the acceptance path went untested")
    return {"sampling_exact": {"ok": not errors, "errors": errors, "n": n, "p_values": pvals,
                               "accepted": run["phases"][0]["accepted"], "built": run["built"]}}


def sweep(models: dict, concurrency=(1, 8, 32), on_cuda: bool = True, smoke: bool = False) -> dict:
    """none / ours / native at each concurrency, one engine per method (closed loop, greedy)."""
    r = random.Random(7)
    max_tokens = 32 if smoke else 128
    engine = {"max_num_seqs": max(concurrency), "max_model_len": 1024}
    if on_cuda:
        engine.update(dtype="bfloat16", enforce_eager=False, gpu_memory_utilization=0.25)
    phases = [{"name": "warmup", "concurrency": max(concurrency), "keep_outputs": False,
               "requests": [{"prompt_token_ids": [r.randrange(3, 510) for _ in range(32)], "max_tokens": 16}
                            for _ in range(max(concurrency))]}]
    for c in concurrency:
        n = max(8 if smoke else 16, 2 * c)
        phases.append({"name": f"c{c}", "concurrency": c, "keep_outputs": False, "requests": [
            {"prompt_token_ids": [r.randrange(3, 510) for _ in range(r.randint(16, 128))], "max_tokens": max_tokens}
            for _ in range(n)]})
    spec = {"method": "dflash", "model": models["drafter"], "num_speculative_tokens": 7}
    methods = {"none": (None, {}), "ours": (spec, {}), "native": (spec, {envs.NATIVE.name: "1"})}
    runs = {m: run_engine({"model": models["target"], "speculative_config": s, "engine": engine, "phases": phases}, env=e)
            for m, (s, e) in methods.items()}
    cells = []
    for c in concurrency:
        base = next(p for p in runs["none"]["phases"] if p["name"] == f"c{c}")
        for m, run in runs.items():
            p = next(p for p in run["phases"] if p["name"] == f"c{c}")
            tps = p["output_tokens"] / p["seconds"]
            cells.append({"method": m, "concurrency": c, "output_tokens_per_s": tps,
                          "speedup": tps / (base["output_tokens"] / base["seconds"]),
                          "tau": tau_from_counters(p["accepted"], p["verify_steps"]),
                          "seconds": p["seconds"], "output_tokens": p["output_tokens"]})
    errors = []
    if on_cuda:
        errors += _type_check(runs["ours"]["built"], V1_RUNNER, OUR_PROPOSER, OUR_DRAFTER)
        errors += [f"native: {e}" for e in _type_check(runs["native"]["built"], V2_RUNNER, V2_SPECULATOR, VLLM_DRAFTER)]
    return {"sweep": {"ok": not errors, "errors": errors, "cells": cells,
                      "methods": {m: {"built": run["built"], "startup_s": run["startup_s"]} for m, run in runs.items()},
                      "config": {"k": 7, "max_tokens": max_tokens, "engine": engine}}}


@dataclass
class GpuCheck:
    out: str = opt("bench/results/gpu-check.json", "result JSON")
    models: str | None = opt(None, "where to make the small models (default: a temp dir)")
    only: str = opt("lossless,sampling,sweep", "comma list of: lossless, sampling, sweep")
    concurrency: str = opt("1,8,32", "concurrencies of the sweep")
    smoke: bool = opt(False, "tiny sizes (tests the script; also on CPU)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--engine-job"]:
        _engine_main(argv[1], argv[2])
        return 0
    ap = argparse.ArgumentParser(prog="python -m dflash_vllm.gpu_check")
    add_options(ap, GpuCheck)
    args = parse_into(GpuCheck, ap.parse_args(argv))
    import torch

    on_cuda = torch.cuda.is_available()
    t0 = time.perf_counter()
    root = args.models or tempfile.mkdtemp(prefix="dflash-gpu-check-")
    models = make_models(root, smoke=args.smoke)
    from .bench.runner import provenance

    result: dict = {"provenance": provenance(), "on_cuda": on_cuda, "smoke": args.smoke, "models": models,
                    "model_seconds": time.perf_counter() - t0, "checks": {}}
    only = set(args.only.split(","))

    def save():
        result["seconds"] = time.perf_counter() - t0
        result["ok"] = all(v.get("ok", False) for v in result["checks"].values())
        os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    stages = [("lossless", lambda: check_runner_and_lossless(models, on_cuda, args.smoke)),
              ("sampling", lambda: check_sampling_exact(models, args.smoke)),
              ("sweep", lambda: sweep(models, tuple(int(c) for c in args.concurrency.split(",")), on_cuda, args.smoke))]
    for name, stage in stages:
        if name not in only:
            continue
        t = time.perf_counter()
        try:
            result["checks"].update(stage())
        except Exception as e:  # one failing stage must not hide the others' results
            result["checks"][name] = {"ok": False, "errors": [f"{type(e).__name__}: {e}"[:6000]]}
        print(f"gpu_check: {name} done in {time.perf_counter() - t:.0f}s", flush=True)
        save()  # partial results survive a timeout
    save()
    for name, check in result["checks"].items():
        print(f"gpu_check: {name}: {'ok' if check.get('ok') else 'FAILED ' + '; '.join(check.get('errors', []))[:2000]}")
    for cell in result["checks"].get("sweep", {}).get("cells", []):
        tau = f"{cell['tau']:.2f}" if cell["tau"] else "-"
        print(f"  c={cell['concurrency']:>3} {cell['method']:<7} {cell['output_tokens_per_s']:>9.0f} tok/s "
              f"x{cell['speedup']:.2f} tau {tau}")
    print(f"gpu_check: wrote {args.out} ({result['seconds']:.0f}s)")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
