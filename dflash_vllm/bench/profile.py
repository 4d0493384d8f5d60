"""Where the time of a step goes, on the demo pair (CPU, the engine core in this process).

    dflash-vllm bench profile draft [--native] [--concurrency 64]   # one drafting call's ops, ours (or native)
    dflash-vllm bench profile none|k0|adaptive [--concurrency 64] [--prompt-set chat] [--out FILE.prof]   # a step
    dflash-vllm bench profile trace [--sets code@64 chat@1] [--concurrency 1]   # the adaptive policy's view
    dflash-vllm bench profile none|k0|adaptive --split [--concurrency 64] [--prompt-set chat]   # a step's parts, no profiler

``draft``: held-out task prompts (60, or 8 per request in flight) at ``--concurrency`` (1
unless set); torch.profiler over drafting calls 20..220, or to the end when fewer
(``propose_draft_token_ids``); prints the mean wall time of a drafting call and the ops' self
time per call (only ops inside the drafting calls). Session 6 used it to find the dense context
gather (issue #12); session 27 compared ours and native at c = 64 (the same GEMMs and attention
kernel, ~26 ms per call each).
``none|k0|adaptive``: the bench's ``free`` prompts (``--prompt-set``) in a closed loop at ``--concurrency`` (a warm-up third,
one unprofiled third, one third under cProfile); prints ms per engine step and writes the
cProfile stats (compare two with ``python -m pstats``, sorted by cumulative time). ``none`` is
no speculation, ``k0`` DFlash with K pinned to 0 (the drafter forward skipped), ``adaptive``
the policy. Session 7 used it to find the 0-draft rejection sampling and drafter input
preparation vLLM ran on K = 0 steps (patch ``plain-step-shortcut``: at c = 1, 8.4 -> 6.8 ms per
step against 6.2-6.7 ms without speculation).
With ``--split``, no profiler: the scheduler's, the model runner's and the proposer's main
methods are timed by the wall clock (``SplitTimer``) over the same driven requests, and the
mean ms per engine step of each is printed (and one JSON line, ``SPLIT {...}``). cProfile
inflates small calls (session 26: the proposer's K = 0 work at c = 1 read 0.28 ms per step under
cProfile, 0.18 by the wall clock), so the split is what to compare between modes; run the
modes alternately, twice each (one run moves by ~10-30 % with this VM). Session 26 used it to
itemise the K = 0 floor.
``trace``: the adaptive policy's own view, step by step, across a change of prompts (``--sets``,
run one after the other on one engine at ``--concurrency``): per set the steps and wall time,
then per 40-step window how many steps drafted and, at the window's end, the policy's ratio of
best to plain goodput, its modelled plain and 16-token drafted step, its drafter forward over
16 tokens, the first decoding request's survival at positions 1-4 and the plain steps it has
measured. Session 12 used it to find the plain-step cost the model got wrong after drafted
steps (4.5-6 ms for a 2.6 ms step) and the deep acceptance rates an earlier workload left behind.
Single runs vary by ~10 % on a 2-core VM: compare within one session, with nothing else running.
"""

from __future__ import annotations

import argparse
import functools
import json
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


def _spec(k: int = 15, **keys) -> dict:
    from .. import paths

    return {"method": "dflash", "model": str(paths.DEMO_DRAFTER), "num_speculative_tokens": k, **keys}


def profile_draft(native: bool, concurrency: int = 1) -> None:
    import bisect
    import collections

    import torch
    from transformers import AutoTokenizer

    from .. import paths
    from ..driver import drive
    from ..training.tasks import make_samples
    from ..prompts import chat_ids

    envs.set(envs.NATIVE, 1 if native else 0)
    llm = _engine(_spec(dflash_adaptive=False), max(8, concurrency))  # every step drafts K
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
             "stop_token_ids": [tok.eos_token_id]} for s in make_samples(max(60, 8 * concurrency), seed=9)]
    drive(llm.llm_engine, reqs, concurrency=concurrency)
    if 20 <= calls[0] < 220:  # fewer calls than the window (large batches): profile to the end
        prof.stop()
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
    if not n:
        raise SystemExit("dflash-vllm bench profile draft: fewer than 20 drafting calls ran, none profiled")
    print(f"{'native' if native else 'ours'}: {n} drafting calls, {sum(b - a for a, b in spans) / n:.1f} us per call, "
          f"ops' self time {sum(self_us.values()) / n:.1f} us per call")
    for name, us in self_us.most_common(22):
        print(f"{name[:60]:60s} {us / n:8.1f} us/call {count[name] / n:6.1f} calls/call")


class SplitTimer:
    """Wall-clock time per call of chosen methods, summed per label: ``wrap(owner, name)``
    replaces ``owner.name`` (an instance's attribute, bound methods and the plugin's own
    wrappers included) with the project's one step timer (``metrics.timed``, wall clock) around
    it, which returns and raises what it did. Nested timed calls each count in full (a caller's
    time includes its callees')."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner, name: str, label: str | None = None) -> None:
        from ..metrics import timed

        fn = getattr(owner, name)  # already bound (or a plain callable): timed's first argument is not passed on
        label = label or f"{type(owner).__name__}.{name}"
        self.seconds.setdefault(label, 0.0)
        self.calls.setdefault(label, 0)

        def observe(seconds: float) -> None:
            self.seconds[label] += seconds
            self.calls[label] += 1

        wrapper = timed(lambda _owner, *a, **kw: fn(*a, **kw), observe, lambda _owner: "cpu")
        setattr(owner, name, functools.partial(wrapper, owner))

    def reset(self) -> None:
        for k in self.seconds:
            self.seconds[k], self.calls[k] = 0.0, 0

    def per_step(self, steps: int) -> dict[str, float]:
        """ms per engine step of each label that was called."""
        return {k: 1e3 * v / max(steps, 1) for k, v in sorted(self.seconds.items()) if self.calls[k]}


# Timed by --split: the engine core's step and the scheduler's, the runner's step phases, and
# the proposer's K = 0 path (plan, queued context) where there is one.
_SPLIT_RUNNER = ("execute_model", "_update_states", "_prepare_inputs", "_build_attention_metadata", "_model_forward",
                 "sample_tokens", "_sample", "_bookkeeping_sync", "propose_draft_token_ids", "take_draft_token_ids")
_SPLIT_PROPOSER = ("_plan_then_propose", "_plan", "_skip_forward", "propose")


def _split_timer(engine) -> SplitTimer:
    """Wrap the parts of an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) after it is
    built: the plugin's checks read the runner's source at start-up, and its per-instance
    wrappers are timed as they stand (ours included)."""
    timer = SplitTimer()
    core = engine.engine_core.engine_core
    timer.wrap(core, "step_fn", "EngineCore.step")  # what the in-process client calls each step
    timer.wrap(core.scheduler, "schedule", "Scheduler.schedule")
    timer.wrap(core.scheduler, "update_from_output", "Scheduler.update_from_output")
    runner = core.model_executor.driver_worker.worker.model_runner
    for name in _SPLIT_RUNNER:
        if hasattr(runner, name):
            timer.wrap(runner, name, f"runner.{name}")
    drafter = getattr(runner, "drafter", None)
    for name in _SPLIT_PROPOSER if drafter is not None else ():
        if hasattr(drafter, name):
            timer.wrap(drafter, name, f"proposer.{name}")
    return timer


def profile_step(mode: str, concurrency: int, out: str, which: str = "free", split: bool = False) -> None:
    import cProfile

    from transformers import AutoTokenizer

    from .. import paths
    from ..driver import drive
    from ..prompts import prompt_set

    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = _engine(None if mode == "none" else _spec(), max(8, concurrency))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 3 * max(32, 2 * concurrency))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=concurrency, id_prefix="warm-")
    if split:
        timer = _split_timer(engine)
        t = time.perf_counter()
        steps = len(drive(engine, reqs[n:], concurrency=concurrency, id_prefix="s-")["steps"])
        ms = 1e3 * (time.perf_counter() - t) / steps
        parts = timer.per_step(steps)
        print(f"{mode} c={concurrency} ({which}): {steps} steps, {ms:.3f} ms/step; ms per step by part:", flush=True)
        for k, v in parts.items():
            print(f"  {k:40s} {v:8.3f}", flush=True)
        print("SPLIT " + json.dumps({"mode": mode, "concurrency": concurrency, "prompt_set": which, "steps": steps,
                                     "ms_per_step": round(ms, 4), "parts": {k: round(v, 4) for k, v in parts.items()}}),
              flush=True)
        return
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


class PolicyTrace:
    """Records every plan of an AdaptivePolicy (``record`` after each ``plan``) and summarises
    them per window: what ``profile trace`` prints, kept apart from the engine so it can be
    tested without one."""

    def __init__(self, window: int = 40):
        self.window = window
        self.rows: list[tuple[int, tuple | None]] = []  # (q, state at this step or None)
        self._in_plan = False

    def traced(self, plan):
        """``AdaptivePolicy.plan`` (the function), recording every plan it makes."""
        def traced_plan(policy, req_ids, is_decode, *args, **kwargs):
            self._in_plan = True
            try:
                k, q = plan(policy, req_ids, is_decode, *args, **kwargs)
            finally:
                self._in_plan = False
            self.record(policy, req_ids, is_decode, q)
            return k, q
        return traced_plan

    def traced_idle(self, idle_step):
        """``AdaptivePolicy.idle_step`` (the function): the steps of an idle window that the
        proposer plans without ``plan`` are recorded too (as plans for the optimum's requests)."""
        def traced_idle_step(policy, num_reqs, num_decode):
            ok = idle_step(policy, num_reqs, num_decode)
            if ok and not self._in_plan:
                ids = policy._optimum_cache.batch[1]
                self.record(policy, ids, [True] * len(ids), 0)
            return ok
        return traced_idle_step

    def record(self, policy, req_ids, is_decode, q: int) -> None:
        state = None
        if (len(self.rows) + 1) % self.window == 0 or not self.rows:
            opt = policy.optimum
            cm = policy.cost
            dec = [r for r, d in zip(req_ids, is_decode) if d]
            if opt is not None and opt[0] is not None and cm.ready:
                surv = policy.acceptance.survival(dec[:1])[0, :4].round(2).tolist() if dec else []
                state = (round(opt[1] / max(opt[2], 1e-12), 2), round(1e3 * float(cm.t_verify(len(dec) or 1)), 2),
                         round(1e3 * float(cm.t_verify(len(dec) or 1, (len(dec) or 1) * 15)), 2),
                         round(1e3 * float(cm.t_draft(16, 1)), 2), surv, cm.plain.n)
        self.rows.append((int(q), state))

    def summary(self, start: int = 0, end: int | None = None) -> list[str]:
        out = []
        rows = self.rows[start:end]
        for w in range(0, len(rows), self.window):
            win = rows[w:w + self.window]
            state = next((st for _, st in reversed(win) if st is not None), None)
            line = f"steps {w:4d}-{w + len(win) - 1:4d}: drafted {sum(q > 0 for q, _ in win):3d} of {len(win)}"
            if state is not None:
                ratio, tp, ts, td, surv, n_plain = state
                line += (f" | G*/G0 {ratio:.2f}, plain {tp:.2f} ms, drafted(16/req) {ts:.2f} ms, T_d(16) {td:.2f} ms,"
                         f" survival {surv}, plain steps seen {n_plain}")
            out.append(line)
        return out


def trace_policy(sets: list[str], concurrency: int, requests: int) -> None:
    from transformers import AutoTokenizer

    from .. import paths
    from ..adaptive import AdaptivePolicy
    from ..driver import drive
    from ..prompts import prompt_set

    envs.set(envs.FIXED_K, "adaptive")
    trace = PolicyTrace()
    AdaptivePolicy.plan = trace.traced(AdaptivePolicy.plan)
    AdaptivePolicy.idle_step = trace.traced_idle(AdaptivePolicy.idle_step)
    runs = [(s.partition("@")[0], int(s.partition("@")[2] or concurrency)) for s in sets]  # "code@64": its own c
    llm = _engine(_spec(), max(8, *(c for _, c in runs)))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    for name, conc in runs:
        _, ids = prompt_set(name, tok, max(requests, 2 * conc))
        reqs = [{"prompt_token_ids": p, "max_tokens": 160, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
                for p in ids]
        start, t = len(trace.rows), time.perf_counter()
        drive(llm.llm_engine, reqs, concurrency=conc, id_prefix=f"{name}{start}-")
        print(f"== {name} c={conc}: {len(trace.rows) - start} steps in {time.perf_counter() - t:.2f} s", flush=True)
        for line in trace.summary(start):
            print("  " + line, flush=True)


@dataclass
class ProfileJob:
    what: str = opt(help="draft: one drafting call's ops (torch.profiler); none, k0, adaptive: an engine step "
                    "under cProfile (no speculation, K pinned to 0, the adaptive policy); trace: the "
                    "adaptive policy's view per 40-step window across --sets", required=True,
                    positional=True, choices=["draft", "none", "k0", "adaptive", "trace"])
    native: bool = opt(False, "draft: vLLM's built-in DFlash on the same weights")
    concurrency: int = opt(1, "requests in flight (draft: 1 unless set)")
    sets: list[str] = opt(["code", "chat"], "trace: prompt sets, run one after the other on one engine "
                          "(SET@C: that set at concurrency C)", nargs="+")
    requests: int = opt(16, "trace: requests per prompt set (at least 2 x its concurrency)")
    prompt_set: str = opt("free", "none/k0/adaptive: the prompt set driven in a closed loop")
    out: str | None = opt(None, "none/k0/adaptive: cProfile stats file (default /tmp/dflash-step-WHAT-cC.prof)")
    split: bool = opt(False, "none/k0/adaptive: no profiler; each part's wall-clock ms per step instead (SplitTimer)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dflash-vllm bench profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, ProfileJob)
    job = parse_into(ProfileJob, ap.parse_args(argv))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    if job.what == "draft":
        profile_draft(job.native, job.concurrency)
    elif job.what == "trace":
        trace_policy(job.sets, job.concurrency, job.requests)
    else:
        profile_step(job.what, job.concurrency, job.out or f"/tmp/dflash-step-{job.what}-c{job.concurrency}.prof",
                     job.prompt_set, split=job.split)
    return 0
