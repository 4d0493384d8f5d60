"""Is Python slower inside the engine's step than alone? (session 31) A fixed snippet (numpy
scalars and a dict, ~the policy's kind of work) timed (a) in a tight loop, (b) once per step
inside the runner's propose_draft_token_ids (before the original), (c) 32 times in a row per
step at the same place (the first call cold, the rest warm).

    python bench/results/s31/scratch/calib.py k0 1
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import numpy as np

D = {i: (float(i), i) for i in range(64)}
A = np.arange(16.0)


def snippet():
    s = 0.0
    for i in range(20):
        e = D.get(i % 64)
        s += e[0] * 0.5 + max(i, 3)
    x = np.zeros(4, dtype=np.int64)
    y = float((A * 0.99).sum())
    return s + y + int(x.sum())


def loop(n):
    t = time.perf_counter()
    for _ in range(n):
        snippet()
    return (time.perf_counter() - t) / n * 1e6


def main():
    print(f"alone: {loop(20000):.2f} us per call", flush=True)
    mode, conc = sys.argv[1], int(sys.argv[2])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = P._engine(None if mode == "none" else P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("chat", tok, 3 * max(32, 2 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=conc, id_prefix="warm-")
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    stats = {"one": [0.0, 0], "first": [0.0, 0], "rest": [0.0, 0]}
    orig = runner.sample_tokens
    step = [0]

    def sample_tokens(*a, **k):
        step[0] += 1
        if step[0] % 2:
            t = time.perf_counter(); snippet(); dt = time.perf_counter() - t
            stats["one"][0] += dt; stats["one"][1] += 1
        else:
            t = time.perf_counter(); snippet(); t1 = time.perf_counter()
            for _ in range(31):
                snippet()
            t2 = time.perf_counter()
            stats["first"][0] += t1 - t; stats["first"][1] += 1
            stats["rest"][0] += t2 - t1; stats["rest"][1] += 31
        return orig(*a, **k)

    runner.sample_tokens = sample_tokens
    drive(engine, reqs[n:], concurrency=conc, id_prefix="s-")
    print("in engine: " + ", ".join(f"{k} {1e6 * v[0] / max(v[1], 1):.2f} us" for k, v in stats.items()), flush=True)
    print(f"alone again: {loop(20000):.2f} us per call", flush=True)


if __name__ == "__main__":
    main()
