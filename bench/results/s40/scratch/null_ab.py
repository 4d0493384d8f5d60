"""Session 40 (issue #10). What the drafting call costs a weak workload, one engine, variants alternated
(rotated order per trial; execute_model timed too): as shipped; with the context queueing skipped
(_skip_forward a no-op); with the whole drafting call a stub returning empty lists (no drafter work of any
kind: the bound). MODE=0 (K = 0 pinned, default) or MODE=adaptive; WARM=N warm-up requests first (8; 64
lets the policy settle).

    [MODE=adaptive] [WARM=64] python bench/results/s40/scratch/null_ab.py CONCURRENCY TRIALS [chat|free|...]
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    c, trials, which = int(sys.argv[1]), int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "chat")
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import numpy as np
    envs.set(envs.FIXED_K, os.environ.get("MODE", "0"))
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 128)
    eos = [tok.eos_token_id]
    n = max(16, 2 * c)
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    ship_skip, ship_prop = d._skip_forward, runner.propose_draft_token_ids
    def stub(*a):
        d._skipped_step = True
        return [[] for _ in range(runner.input_batch.num_reqs)]
    variants = {"shipped": (ship_skip, ship_prop), "noqueue": (lambda *a, **k: None, ship_prop), "stub": (ship_skip, stub)}
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 64, "stop_token_ids": eos} for p in ids[:int(os.environ.get("WARM", 8))]], concurrency=c, id_prefix="warm-")
    res = {k: [] for k in variants}
    tv = {k: [] for k in variants}
    acc = [0.0]
    ex = runner.execute_model
    def timed_ex(*a, **k):
        t = time.perf_counter()
        try:
            return ex(*a, **k)
        finally:
            acc[0] += time.perf_counter() - t
    runner.execute_model = timed_ex
    names = list(variants)
    for t in range(trials):
        order = names[t % 3:] + names[:t % 3]
        for v in order:
            d._skip_forward, runner.propose_draft_token_ids = variants[v]
            rq = [{"prompt_token_ids": ids[(t * n + i) % len(ids)], "max_tokens": 64, "ignore_eos": False, "stop_token_ids": eos} for i in range(n)]
            acc[0] = 0.0
            t0 = time.perf_counter(); s = len(drive(engine, rq, concurrency=c, id_prefix=f"{v}{t}-")["steps"])
            res[v].append(1e3 * (time.perf_counter() - t0) / s)
            tv[v].append(1e3 * acc[0] / s)
    base = np.array(res["shipped"])
    for v in names:
        x = np.array(res[v])
        y, yb = np.array(tv[v]), np.array(tv["shipped"])
        print(f"c={c} {which} {v:8s}: ms/step mean {x.mean():.3f}; / shipped: geo {np.exp(np.mean(np.log(x / base))):.4f}, median {np.median(x / base):.4f}"
              f" | execute_model ms/step {y.mean():.3f}, / shipped geo {np.exp(np.mean(np.log(y / yb))):.4f}", flush=True)
main()
