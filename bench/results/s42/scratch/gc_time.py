"""Session 42 (issue #10): time spent in Python's garbage collector per engine step, in-process
(gc.callbacks), no speculation against K = 0 pinned and adaptive, chat prompts.

    python bench/results/s42/scratch/gc_time.py none|k0|adaptive CONCURRENCY
"""
import gc
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    mode, c = sys.argv[1], int(sys.argv[2])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    if mode != "none":
        envs.set(envs.FIXED_K, {"k0": 0}.get(mode, "adaptive"))
    llm = P._engine(P._spec() if mode != "none" else None, max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("chat", tok, 3 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    spent, count, t = [0.0, 0.0, 0.0], [0, 0, 0], {}

    def cb(phase, info):
        if phase == "start":
            t["s"] = time.perf_counter()
        else:
            g = info["generation"]
            spent[g] += time.perf_counter() - t["s"]
            count[g] += 1
    gc.callbacks.append(cb)
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    wall = time.perf_counter() - t0
    gc.callbacks.remove(cb)
    print(f"GC {mode} c={c}: {steps} steps {1e3 * wall / steps:.3f} ms/step; collections gen0/1/2 {count}, "
          f"us/step {', '.join(f'{1e6 * s / steps:.1f}' for s in spent)}; frozen {gc.get_freeze_count()}, "
          f"thresholds {gc.get_threshold()}")


if __name__ == "__main__":
    main()
