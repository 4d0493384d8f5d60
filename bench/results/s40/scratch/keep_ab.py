"""Session 40 (issue #10). One engine, alternated: code c=64 then chat c=1 (the bench's strong-to-weak
switch), with the acceptance model's shift_keep at A or B; chat c=1 tok/s and drafter forwards per trial.
One process, so no process-to-process spread between the variants.

    python bench/results/s40/scratch/keep_ab.py 0.25 0.1 8
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    A, B, trials = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import numpy as np
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    sets = {s: prompt_set(s, tok, 128)[1] for s in ("tasks", "chat", "code")}
    eos = [tok.eos_token_id]
    def reqs(which, n, off=0):
        p = sets[which]
        return [{"prompt_token_ids": p[(off + i) % len(p)], "max_tokens": 160, "ignore_eos": False, "stop_token_ids": eos} for i in range(n)]
    engine = llm.llm_engine
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    pol = d.policy
    drive(engine, reqs("tasks", 8), concurrency=4, id_prefix="warm-")
    res = {A: [], B: []}
    for t in range(trials):
        for keep in ((A, B) if t % 2 == 0 else (B, A)):
            pol.acceptance.shift_keep = keep
            drive(engine, reqs("code", 128, t), concurrency=64, id_prefix=f"s{t}{keep}-")
            f0 = d.num_drafter_forwards
            t0 = time.perf_counter(); out = drive(engine, reqs("chat", 16, 16 * t), concurrency=1, id_prefix=f"c{t}{keep}-")
            wall = time.perf_counter() - t0
            toks = sum(s["new_tokens"] for s in out["steps"])
            res[keep].append((toks / wall, d.num_drafter_forwards - f0, len(out["steps"])))
            print(f"trial {t} keep {keep}: chat c=1 {toks / wall:.1f} tok/s, drafter forwards {d.num_drafter_forwards - f0}, steps {len(out['steps'])}", flush=True)
    a, b = np.array([x[0] for x in res[A]]), np.array([x[0] for x in res[B]])
    print(f"keep {A}: {a.mean():.1f} tok/s, fwd {np.mean([x[1] for x in res[A]]):.1f}; keep {B}: {b.mean():.1f} tok/s, fwd {np.mean([x[1] for x in res[B]]):.1f}; "
          f"B/A geo {np.exp(np.mean(np.log(b / a))):.4f}")
main()
