"""Per-step wall time by category: none's steps vs adaptive's dormant steps (no drafter forward this step,
nor the one before or after) and steps around probes. In-process engine, chat/free prompts (session 40).

    [MAXSEQS=N] python bench/results/s40/scratch/steps_cat.py none|k0|adaptive CONCURRENCY [chat]
"""
import os, sys, time, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

def main():
    mode, c, which = sys.argv[1], int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "chat")
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import numpy as np
    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = P._engine(None if mode == "none" else P._spec(), int(os.environ.get("MAXSEQS", max(8, c))))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 3 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    d = getattr(runner, "drafter", None)
    rec = []
    fn = core.step_fn
    def step_fn(*a, **k):
        f0 = d.num_drafter_forwards if d is not None else 0
        t = time.perf_counter(); r = fn(*a, **k); dt = time.perf_counter() - t
        rec.append((dt, (d.num_drafter_forwards if d is not None else 0) - f0, runner.input_batch.num_reqs))
        return r
    core.step_fn = step_fn
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    wall = time.perf_counter() - t0
    dt = np.array([x[0] for x in rec]) * 1e3; dr = np.array([x[1] for x in rec]) > 0
    near = dr.copy(); near[1:] |= dr[:-1]; near[:-1] |= dr[1:]
    quiet = ~near
    print("CAT " + json.dumps({"mode": mode, "c": c, "set": which, "steps": len(rec), "wall_ms_per_step": round(1e3 * wall / len(rec), 3),
          "mean": round(dt.mean(), 3), "median": round(float(np.median(dt)), 3), "quiet_n": int(quiet.sum()), "quiet_mean": round(dt[quiet].mean(), 3),
          "quiet_median": round(float(np.median(dt[quiet])), 3), "drafted_n": int(dr.sum()), "drafted_mean": round(dt[dr].mean(), 3) if dr.any() else None,
          "after_n": int((near & ~dr).sum()), "after_mean": round(dt[near & ~dr].mean(), 3) if (near & ~dr).any() else None,
          "share_loss_near": round(float(dt[near].sum() - near.sum() * np.median(dt[quiet])) / dt.sum(), 4)}), flush=True)

if __name__ == "__main__":
    main()
