"""Run one vLLM engine over a scripted workload, in its own process, and report what happened.

Tests and benchmarks describe a job as JSON; ``run_job_subprocess`` starts
``python -m dflash_vllm.harness`` (a fresh process: one engine at a time, nothing leaks
between engines, and ``DFLASH_VLLM_NATIVE`` selects ours or vLLM's DFlash) and returns:
per request the output token ids, finish reason and vLLM's own per-step accepted-draft
counts; per step the wall time, batch size and tokens emitted.

Job keys: model, speculative_config (or null), native (bool), engine (extra LLM kwargs),
requests: [{prompt_token_ids, max_tokens, temperature?, top_p?, top_k?, seed?,
stop_token_ids?, arrive_step?}].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def sampling_params(r: dict):
    """A job request's SamplingParams (token ids in and out; EOS ignored unless the request says)."""
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=r["max_tokens"], temperature=r.get("temperature", 0.0), top_p=r.get("top_p", 1.0),
        top_k=r.get("top_k", 0), seed=r.get("seed"), stop_token_ids=r.get("stop_token_ids"),
        ignore_eos=r.get("ignore_eos", True), detokenize=False, logprobs=r.get("logprobs"),
    )


def run_job(job: dict) -> dict:
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    engine_kwargs = dict(
        dtype="float32", gpu_memory_utilization=0.3, max_model_len=1024, enforce_eager=True, seed=0,
        skip_tokenizer_init=True, max_num_seqs=32, disable_log_stats=True,
    )
    engine_kwargs.update(job.get("engine", {}))
    spec = job.get("speculative_config")
    if spec:
        engine_kwargs["per_request_spec_decode_metrics"] = "detailed"
    for module in job.get("preload", []):  # e.g. a test's deliberately broken sampler
        __import__(module)
    timers = _install_step_timers() if job.get("profile") else None
    t_start = time.perf_counter()
    llm = LLM(model=job["model"], speculative_config=spec, **engine_kwargs)
    startup_s = time.perf_counter() - t_start
    engine = llm.llm_engine
    preemptions = _count_preemptions(engine)
    reqs = job["requests"]
    pending = sorted(range(len(reqs)), key=lambda i: reqs[i].get("arrive_step", 0))
    results: dict[int, dict] = {}
    steps: list[dict] = []
    step = 0
    emitted: dict[int, int] = {}
    while len(results) < len(reqs):
        while pending and reqs[pending[0]].get("arrive_step", 0) <= step:
            i = pending.pop(0)
            r = reqs[i]
            engine.add_request(str(i), TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), sampling_params(r))
            emitted[i] = 0
        if timers is not None:
            timers.clear()
        t0 = time.perf_counter()
        outs = engine.step()
        dt = time.perf_counter() - t0
        n_unfinished = sum(1 for i in emitted if i not in results)
        new_tokens = 0
        for o in outs:
            i = int(o.request_id)
            c = o.outputs[0]
            new_tokens += len(c.token_ids) - emitted.get(i, 0)
            emitted[i] = len(c.token_ids)
            if o.finished:
                m = getattr(c, "spec_decode_metrics", None)
                results[i] = {
                    "token_ids": list(c.token_ids),
                    "finish_reason": c.finish_reason,
                    "accepted_per_step": list(m.per_step_accepted) if m is not None else None,
                    "drafted_per_step": list(m.per_step_drafted) if m is not None else None,
                    "logprobs": None if c.logprobs is None else [
                        float(lp[t].logprob) for lp, t in zip(c.logprobs, c.token_ids)],
                }
        steps.append({"seconds": dt, "num_unfinished": n_unfinished, "new_tokens": new_tokens, **(dict(timers) if timers else {})})
        step += 1
        if step > 100_000:
            raise RuntimeError("harness: the workload did not finish")
    out = {"outputs": [results[i] for i in range(len(reqs))], "steps": steps, "startup_seconds": startup_s,
           "num_preemptions": preemptions[0] if preemptions is not None else None,
           "executor": _executor_name(engine), "shards": llm.collective_rpc(_qkv_shards)}
    engine.engine_core.shutdown()  # now, while Ray (if used) is still up; not in interpreter teardown
    return out


def _executor_name(engine) -> str | None:
    try:
        return type(engine.engine_core.engine_core.model_executor).__name__
    except AttributeError:
        return None


def _qkv_shards(worker) -> dict:
    """Per rank: output width of the first QKV projection of the target and of the drafter."""

    def width(model):
        for name, m in model.named_modules() if model is not None else ():
            if name.endswith("qkv_proj"):
                return int(m.output_size_per_partition)
        return None

    runner = worker.model_runner
    return {"target_qkv": width(runner.model), "drafter_qkv": width(getattr(getattr(runner, "drafter", None), "model", None))}


def _install_step_timers(sync: bool = False) -> dict:
    """Split each engine step into target forward / draft / the rest (engine core in-process).

    verify_s: GPUModelRunner.execute_model (the target forward over the verified block);
    draft_s: propose_draft_token_ids (whichever proposer: ours or native);
    sample_s: sample_tokens minus draft_s (sampling, rejection sampling, bookkeeping).
    With `sync` (CUDA), each timed call ends with a device synchronize, so the split is the
    device time of each phase; that serialises what async scheduling would overlap.
    """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    acc: dict[str, float] = {}
    if sync:
        import torch

        sync = torch.cuda.is_available()

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if sync:
                    torch.cuda.synchronize()
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    GPUModelRunner.execute_model = timed("verify_s", GPUModelRunner.execute_model)
    GPUModelRunner.sample_tokens = timed("sample_and_draft_s", GPUModelRunner.sample_tokens)
    GPUModelRunner.propose_draft_token_ids = timed("draft_s", GPUModelRunner.propose_draft_token_ids)
    return acc


def _count_preemptions(engine) -> list[int] | None:
    """With the engine core in this process, count the scheduler's preemptions."""
    try:
        scheduler = engine.engine_core.engine_core.scheduler
    except AttributeError:
        return None
    counter = [0]
    original = scheduler._preempt_request

    def preempt(*args, **kwargs):
        counter[0] += 1
        return original(*args, **kwargs)

    scheduler._preempt_request = preempt
    return counter


def run_job_subprocess(job: dict, timeout: float = 900, env: dict | None = None) -> dict:
    """Run `job` in a fresh Python process; `job['native']` picks vLLM's built-in DFlash."""
    with tempfile.TemporaryDirectory() as d:
        job_path, out_path = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["DFLASH_VLLM_NATIVE"] = "1" if job.get("native") else "0"
        full_env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process: counters
        proc = subprocess.run([sys.executable, "-m", "dflash_vllm.harness", job_path, out_path], env=full_env,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out_path):
            text = proc.stdout + proc.stderr
            log = os.path.join(tempfile.gettempdir(), f"dflash-harness-failed-{os.getpid()}-{int(time.time())}.log")
            with open(log, "w") as f:
                f.write(text)
            first = text.find("Traceback")  # the first error is the cause; what follows is often teardown noise
            head = f"first traceback:\n{text[first:first + 4000]}\n...\n" if first >= 0 else ""
            raise RuntimeError(f"harness job failed (exit {proc.returncode}; full log {log}):\n{head}last output:\n{text[-4000:]}")
        with open(out_path) as f:
            out = json.load(f)
        log = proc.stdout + proc.stderr
        out["log"] = log if len(log) < 60_000 else log[:30_000] + "\n...\n" + log[-30_000:]
        return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        job = json.load(f)
    result = run_job(job)
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)
