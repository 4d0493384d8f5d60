"""The one loop that drives an in-process vLLM engine over a list of requests, and the bench's
step split (through the one step timer, ``metrics.timed``). Harness jobs (tests, `dflash-vllm bench sampling-tau`), bench cells (`dflash_vllm/bench/worker.py`) and the GPU checks
(`gpu_check.py`) all run through `drive`; they differ only in how requests are admitted:
- ``arrive_step`` on a request: it joins at that engine step (scripted waves, in tests);
- ``concurrency``: at most that many in flight, a new one joins as soon as one finishes
  (closed-loop load, in the bench).

Times are wall-clock around ``engine.step()``, the way a streaming client sees them, minus HTTP:
TTFT = first output after the request was added; ITL = gap between successive outputs of a
request (a speculative step can deliver several tokens at once, as a streamed chunk does).
"""

from __future__ import annotations

import time


def sampling_params(r: dict):
    """A request's SamplingParams (token ids in and out; EOS ignored unless the request says)."""
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=r["max_tokens"], temperature=r.get("temperature", 0.0), top_p=r.get("top_p", 1.0),
        top_k=r.get("top_k", 0), seed=r.get("seed"), stop_token_ids=r.get("stop_token_ids"),
        ignore_eos=r.get("ignore_eos", True), detokenize=False, logprobs=r.get("logprobs"),
    )


def drive(engine, requests: list[dict], concurrency: int | None = None, timers: dict | None = None,
          max_steps: int = 100_000, id_prefix: str = "") -> dict:
    """Step `engine` until every request is done.

    Returns {"wall_s", "itl_s": [...], "outputs": [per request: token_ids, finish_reason,
    accepted_per_step, drafted_per_step ([] without speculation), logprobs, ttft_s, e2e_s],
    "steps": [per step: seconds, running (requests in flight), new_tokens, and the `timers`
    split when given]}. Request i is sent to vLLM as f"{id_prefix}{i}" (a prefix keeps ids unique
    when one engine runs several workloads)."""
    from vllm.inputs import TokensPrompt

    pending = sorted(range(len(requests)), key=lambda i: requests[i].get("arrive_step", 0))  # stable
    pending.reverse()  # pop() takes the next arrival
    inflight: set[int] = set()
    added, first, last, n_out = {}, {}, {}, {}
    itl: list[float] = []
    out: dict[int, dict] = {}
    steps: list[dict] = []
    t_begin = time.perf_counter()
    while len(out) < len(requests):
        step_no = len(steps)
        while (pending and requests[pending[-1]].get("arrive_step", 0) <= step_no
               and (concurrency is None or len(inflight) < concurrency)):
            i = pending.pop()
            r = requests[i]
            engine.add_request(f"{id_prefix}{i}", TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), sampling_params(r))
            inflight.add(i)
            added[i], n_out[i] = time.perf_counter(), 0
        running = len(inflight)
        if timers is not None:
            timers.clear()
        t0 = time.perf_counter()
        outs = engine.step()
        t1 = time.perf_counter()
        new_tokens = 0
        for o in outs:
            i = int(o.request_id[len(id_prefix):])
            c = o.outputs[0]
            k = len(c.token_ids) - n_out[i]
            if k > 0:
                if i not in first:
                    first[i] = t1
                else:
                    itl.append(t1 - last[i])
                last[i], n_out[i] = t1, len(c.token_ids)
                new_tokens += k
            if o.finished:
                m = getattr(c, "spec_decode_metrics", None)
                inflight.discard(i)
                out[i] = {
                    "token_ids": list(c.token_ids),
                    "finish_reason": c.finish_reason,
                    "accepted_per_step": list(m.per_step_accepted) if m is not None else [],
                    "drafted_per_step": list(m.per_step_drafted) if m is not None else [],
                    "logprobs": None if c.logprobs is None else [
                        float(lp[t].logprob) for lp, t in zip(c.logprobs, c.token_ids)],
                    "ttft_s": first.get(i, t1) - added[i],
                    "e2e_s": t1 - added[i],
                }
        step = {"seconds": t1 - t0, "running": running, "new_tokens": new_tokens}
        if timers:
            step.update(timers)
        steps.append(step)
        if len(steps) > max_steps:
            raise RuntimeError(f"the workload did not finish in {max_steps} engine steps")
    return {"wall_s": time.perf_counter() - t_begin, "outputs": [out[i] for i in range(len(requests))],
            "steps": steps, "itl_s": itl}


def install_step_timers(sync: bool = False) -> dict:
    """Split each engine step into target forward / draft / the rest (engine core in-process).

    verify_s: GPUModelRunner.execute_model (the target forward over the verified block);
    draft_s: propose_draft_token_ids (whichever proposer: ours or native);
    sample_and_draft_s: sample_tokens (sampling, rejection sampling, bookkeeping, and draft_s).
    With `sync` (CUDA), each timed call ends with a device synchronize, so the split is the
    device time of each phase; that serialises what async scheduling would overlap.
    Returns the dict the timers add into (`drive` clears it before every step).
    """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from .metrics import timed

    acc: dict[str, float] = {}
    if sync:
        import torch

        sync = torch.cuda.is_available()
    mode = "cuda-sync" if sync else "cpu"

    def add(name):
        def observe(seconds):
            acc[name] = acc.get(name, 0.0) + seconds
        return observe

    GPUModelRunner.execute_model = timed(GPUModelRunner.execute_model, add("verify_s"), lambda r: mode)
    GPUModelRunner.sample_tokens = timed(GPUModelRunner.sample_tokens, add("sample_and_draft_s"), lambda r: mode)
    GPUModelRunner.propose_draft_token_ids = timed(GPUModelRunner.propose_draft_token_ids, add("draft_s"), lambda r: mode)
    return acc


def count_preemptions(engine) -> list[int] | None:
    """With the engine core in this process, count the scheduler's preemptions: returns a
    one-element list that grows as they happen (None when the core runs in another process)."""
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
