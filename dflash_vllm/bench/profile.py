"""Where the time of a step goes, on the demo pair (CPU, the engine core in this process).

    dflash-vllm bench profile draft [--native]          # one drafting call's ops, ours (or native)
    dflash-vllm bench profile none|k0|adaptive [--concurrency 64] [--out FILE.prof]   # an engine step

``draft``: 60 held-out task prompts one at a time; torch.profiler over drafting calls 20..220
(``propose_draft_token_ids``); prints the mean wall time of a drafting call and the ops' self
time per call (only ops inside the drafting calls). Session 6 used it to find the dense context
gather (issue #12).
``none|k0|adaptive``: the bench's ``free`` prompts in a closed loop at ``--concurrency`` (a warm-up third,
one unprofiled third, one third under cProfile); prints ms per engine step and writes the
cProfile stats (compare two with ``python -m pstats``, sorted by cumulative time). ``none`` is
no speculation, ``k0`` DFlash with K pinned to 0 (the drafter forward skipped), ``adaptive``
the policy. Session 7 used it to find the 0-draft rejection sampling and drafter input
preparation vLLM ran on K = 0 steps (patch ``plain-step-shortcut``: at c = 1, 8.4 -> 6.8 ms per
step against 6.2-6.7 ms without speculation).
Single runs vary by ~10 % on a 2-core VM: compare within one session, with nothing else running.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from .. import envs
from ..options import add_options, opt, parse_into


def _engine(spec: dict | None, max_num_seqs: int):
    from vllm import LLM

    from .. import paths

    return LLM(model=str(paths.DEMO_TARGET), speculative_config=spec, dtype="float32", enforce_eager=True,
               kv_cache_memory_bytes=2**29, skip_tokenizer_init=True, max_num_seqs=max_num_seqs, max_model_len=1024)


def _spec(k: int = 15) -> dict:
    from .. import paths

    return {"method": "dflash", "model": str(paths.DEMO_DRAFTER), "num_speculative_tokens": k}


def profile_draft(native: bool) -> None:
    import bisect
    import collections

    import torch
    from transformers import AutoTokenizer

    from .. import paths
    from ..driver import drive
    from ..training.tasks import make_samples
    from ..prompts import chat_ids

    envs.set(envs.NATIVE, 1 if native else 0)
    llm = _engine(_spec(), 8)
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.propose_draft_token_ids
    calls = [0]
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

    def propose(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 20:
            prof.start()
        with torch.profiler.record_function("PROPOSE"):
            out = original(self, *args, **kwargs)
        if calls[0] == 220:
            prof.stop()
        return out

    GPUModelRunner.propose_draft_token_ids = propose
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt), "max_tokens": 96, "ignore_eos": False,
             "stop_token_ids": [tok.eos_token_id]} for s in make_samples(60, seed=9)]
    drive(llm.llm_engine, reqs, concurrency=1)
    events = prof.events()
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == "PROPOSE")
    starts = [a for a, _ in spans]
    self_us, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.name == "PROPOSE":
            continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        if i >= 0 and e.time_range.end <= spans[i][1]:
            self_us[e.name] += e.self_cpu_time_total
            count[e.name] += 1
    n = len(spans)
    print(f"{'native' if native else 'ours'}: {n} drafting calls, {sum(b - a for a, b in spans) / n:.1f} us per call, "
          f"ops' self time {sum(self_us.values()) / n:.1f} us per call")
    for name, us in self_us.most_common(22):
        print(f"{name[:60]:60s} {us / n:8.1f} us/call {count[name] / n:6.1f} calls/call")


def profile_step(mode: str, concurrency: int, out: str) -> None:
    import cProfile

    from transformers import AutoTokenizer

    from .. import paths
    from ..driver import drive
    from ..prompts import prompt_set

    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = _engine(None if mode == "none" else _spec(), max(8, concurrency))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("free", tok, 3 * max(32, 2 * concurrency))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=concurrency, id_prefix="warm-")
    t = time.perf_counter()
    steps = len(drive(engine, reqs[n:2 * n], concurrency=concurrency, id_prefix="a-")["steps"])
    print(f"{mode} c={concurrency}: {steps} steps, {1e3 * (time.perf_counter() - t) / steps:.2f} ms/step unprofiled",
          flush=True)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    steps = len(drive(engine, reqs[2 * n:], concurrency=concurrency, id_prefix="b-")["steps"])
    prof.disable()
    print(f"{mode} c={concurrency}: {steps} steps, {1e3 * (time.perf_counter() - t) / steps:.2f} ms/step "
          f"under cProfile; stats in {out}", flush=True)
    prof.dump_stats(out)


@dataclass
class ProfileJob:
    what: str = opt(help="draft: one drafting call's ops (torch.profiler); none, k0, adaptive: an engine step "
                    "under cProfile (no speculation, K pinned to 0, the adaptive policy)", required=True,
                    positional=True, choices=["draft", "none", "k0", "adaptive"])
    native: bool = opt(False, "draft: vLLM's built-in DFlash on the same weights")
    concurrency: int = opt(1, "none/k0/adaptive: requests in flight")
    out: str | None = opt(None, "none/k0/adaptive: cProfile stats file (default /tmp/dflash-step-WHAT-cC.prof)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dflash-vllm bench profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, ProfileJob)
    job = parse_into(ProfileJob, ap.parse_args(argv))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    if job.what == "draft":
        profile_draft(job.native)
    else:
        profile_step(job.what, job.concurrency, job.out or f"/tmp/dflash-step-{job.what}-c{job.concurrency}.prof")
    return 0
