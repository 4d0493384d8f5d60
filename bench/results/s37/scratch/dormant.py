"""Where a dormant step's extra time goes (session 37, issue #10): one in-process engine of the
demo pair per mode (none | k0 | adaptive), a long warm-up (the policy settles), then every part
of the step timed by the wall clock (bench/profile.py's SplitTimer plus the proposer's pieces).

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s37/scratch/dormant.py MODE C [SET] [ROUNDS]
"""
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    mode, conc = sys.argv[1], int(sys.argv[2])
    which = sys.argv[3] if len(sys.argv) > 3 else "chat"
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = P._engine(None if mode == "none" else P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    per = max(32, 2 * conc)
    _, ids = prompt_set(which, tok, (rounds + 1) * per)
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    engine = llm.llm_engine
    drive(engine, reqs[:per], concurrency=conc, id_prefix="warm-")
    timer = P._split_timer(engine)
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = getattr(runner, "drafter", None)
    if d is not None:
        for name in ("_close_door", "_idle_plan", "_catch_up", "_observe_draft_time", "_flush_queue", "_write_context"):
            timer.wrap(d, name, f"proposer.{name}")
        q = d._ctx_queue
        for name in ("end", "schedule", "needed", "add", "take", "shed", "prune"):
            timer.wrap(q, name, f"queue.{name}")
        pol = d.policy
        for name in ("on_step", "plan", "idle_step", "on_draft_time"):
            if hasattr(pol, name):
                timer.wrap(pol, name, f"policy.{name}")
    out = []
    for r in range(rounds):
        timer.reset()
        t = time.perf_counter()
        steps = len(drive(engine, reqs[(r + 1) * per:(r + 2) * per], concurrency=conc, id_prefix=f"r{r}-")["steps"])
        ms = 1e3 * (time.perf_counter() - t) / steps
        parts = timer.per_step(steps)
        out.append({"round": r, "steps": steps, "ms_per_step": round(ms, 4),
                    "calls": {k: timer.calls[k] for k in parts}, "parts": {k: round(v, 4) for k, v in parts.items()}})
        print(f"{mode} c={conc} {which} round {r}: {steps} steps, {ms:.3f} ms/step", flush=True)
    keys = sorted({k for o in out for k in o["parts"]})
    for k in keys:
        print(f"  {k:36s}" + " ".join(f"{o['parts'].get(k, 0):8.3f}" for o in out) + f"   calls {out[-1]['calls'].get(k, 0)}")
    print("DORMANT " + json.dumps({"mode": mode, "concurrency": conc, "set": which, "rounds": out}))


if __name__ == "__main__":
    main()
