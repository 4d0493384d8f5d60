"""Run one vLLM engine over a scripted workload, in its own process, and report what happened.

Tests and benchmarks describe a job as JSON; ``run_job_subprocess`` starts
``python -m dflash_vllm.harness`` (a fresh process: one engine at a time, nothing leaks
between engines, and ``DFLASH_VLLM_NATIVE`` selects ours or vLLM's DFlash) and returns:
what `driver.drive` reports (per request the output token ids, finish reason and vLLM's own
per-step accepted-draft counts; per step the wall time, requests in flight and tokens emitted)
plus the engine's start-up time, preemptions, executor and tensor-parallel shards.

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

from . import envs
from .driver import count_preemptions, drive, install_step_timers


def run_job(job: dict) -> dict:
    from vllm import LLM

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
    timers = install_step_timers() if job.get("profile") else None
    t_start = time.perf_counter()
    llm = LLM(model=job["model"], speculative_config=spec, **engine_kwargs)
    startup_s = time.perf_counter() - t_start
    engine = llm.llm_engine
    preemptions = count_preemptions(engine)
    run = drive(engine, job["requests"], timers=timers)
    out = {**run, "startup_seconds": startup_s,
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


def run_job_subprocess(job: dict, timeout: float = 900, env: dict | None = None) -> dict:
    """Run `job` in a fresh Python process; `job['native']` picks vLLM's built-in DFlash."""
    with tempfile.TemporaryDirectory() as d:
        job_path, out_path = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env[envs.NATIVE.name] = "1" if job.get("native") else "0"
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
