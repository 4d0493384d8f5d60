"""Session 41 (issue #12). Per-step draft times of one context-sweep cell, ours and native alternated
(the sweep's engines and requests; dflash_vllm/bench/context_sweep.py), to see where the mean goes.

    python bench/results/s41/scratch/sweep_steps.py CONTEXT BATCH MAX_TOKENS PASSES
"""
import os, sys, statistics
from dflash_vllm.bench import context_sweep as S
from dflash_vllm.bench.runner import Worker


def main():
    ctx, b, mt, passes = (int(x) for x in sys.argv[1:5])
    target, drafter = S.make_pair("/tmp/dflash-context-sweep")
    max_len = ctx + mt + 15 + 64
    engine = dict(dtype="float32", enforce_eager=True, seed=0, max_model_len=max_len, max_num_seqs=b,
                  max_num_batched_tokens=max(8192, ctx), skip_tokenizer_init=True, disable_log_stats=True,
                  kv_cache_memory_bytes=int(1.5 * b * max_len * 6 * 2 * 2 * 64 * 4))
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": 15, "dflash_adaptive": False}
    os.makedirs("/tmp/s41sweep", exist_ok=True)
    ws = {m: Worker(m, {"model": target, "engine": engine, "speculative_config": spec, **S.METHODS[m]}, f"/tmp/s41sweep/{m}.log")
          for m in ("ours", "native")}
    try:
        for m, w in ws.items():
            w.call({"cmd": "run", "requests": S.cell_requests(256, 1, 8, seed=1), "concurrency": 1})
        for p in range(passes):
            for m in (("ours", "native") if p % 2 == 0 else ("native", "ours")):
                res = ws[m].call({"cmd": "run", "requests": S.cell_requests(ctx, b, mt, seed=ctx * 100 + b), "concurrency": b})
                steps = [s for s in res["steps"] if s["new_tokens"] > 0 and "draft_s" in s][1:]
                d = [1e3 * s["draft_s"] for s in steps]
                print(f"pass {p} {m}: n {len(d)} mean {statistics.mean(d):.2f} median {statistics.median(d):.2f} "
                      f"first5 {[round(x, 1) for x in d[:5]]} max {max(d):.1f}", flush=True)
    finally:
        for w in ws.values():
            w.close()


if __name__ == "__main__":
    main()
