"""Session 41 (issue #10). Where the adaptive policy's plan spends its time: cProfile over the
policy's plan / on_step calls only (and, with WHAT=hook, the proposer's whole drafting hook), in an
in-process engine on the demo pair, adaptive, SET prompts (tasks unless set) at concurrency C.

    [SET=chat] [WHAT=plan|hook] python bench/results/s41/scratch/plan_prof.py C [OUT.prof]
"""
import os, sys, time, cProfile, pstats
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    c = int(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else f"/tmp/plan_{c}.prof"
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(os.environ.get("SET", "tasks"), tok, 3 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    prof = cProfile.Profile()
    stats = {"calls": 0, "s": 0.0}
    names = ("plan", "on_step") if os.environ.get("WHAT", "plan") == "plan" else ()
    owner = d.policy
    if not names:
        owner, names = d, ("_plan_then_propose",)
    for name in names:
        fn = getattr(owner, name)
        def wrapped(*a, _fn=fn, **kw):
            t = time.perf_counter()
            prof.enable()
            try:
                return _fn(*a, **kw)
            finally:
                prof.disable()
                stats["calls"] += 1
                stats["s"] += time.perf_counter() - t
        setattr(owner, name, wrapped)
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    wall = time.perf_counter() - t0
    print(f"c={c}: {steps} steps, {1e3 * wall / steps:.3f} ms/step; profiled calls {stats['calls']}, "
          f"{1e6 * stats['s'] / steps:.1f} us/step under cProfile; drafter forwards {d.num_drafter_forwards}")
    prof.dump_stats(out)
    pstats.Stats(out).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
