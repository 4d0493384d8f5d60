"""How much of a step goes to oneDNN primitive creation (session 38, issue #10). vLLM's CPU
linears call ``vllm._custom_ops.onednn_mm(handler, x, bias)``; each handler keeps primitives for
32 batch widths M (``create_onednn_mm(w, 32)``) and builds one for any other M (~0.3-1 ms per
layer on this VM, once per process for a new M, again after an eviction). One in-process engine
of the demo pair per mode (none | k7 | adaptive), the bench's tasks cells c = 1..64 (and free
with SET=free), then the same again; per pass: onednn_mm calls and time per step, the calls
whose M was not among the handler's 32 most recent (a miss if the cache is LRU), their mean
time against a hit's at a similar M.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s38/scratch/mm_misses.py MODE [SET] [PASSES]
"""
import collections
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    mode = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "tasks"
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    from transformers import AutoTokenizer
    from vllm import _custom_ops as ops

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    if mode != "none":
        envs.set(envs.FIXED_K, "adaptive" if mode == "adaptive" else mode[1:])
    llm = P._engine(None if mode == "none" else P._spec(), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 128)
    eos = [tok.eos_token_id]
    engine = llm.llm_engine

    lru: dict = collections.defaultdict(collections.OrderedDict)
    stats = {"calls": 0, "t": 0.0, "miss": 0, "t_miss": 0.0, "new": 0, "t_new": 0.0}
    seen: set = set()
    by_m = collections.defaultdict(list)  # hit times per (handler, M bucket)
    miss_t = []
    orig = ops.onednn_mm

    def timed(handler, x, bias):
        m = x.shape[0]
        key = (id(handler), m)
        t0 = time.perf_counter()
        y = orig(handler, x, bias)
        dt = time.perf_counter() - t0
        c = lru[id(handler)]
        hit = m in c
        if hit:
            c.move_to_end(m)
        else:
            c[m] = True
            if len(c) > 32:
                c.popitem(last=False)
        stats["calls"] += 1
        stats["t"] += dt
        if key not in seen:
            seen.add(key)
            stats["new"] += 1
            stats["t_new"] += dt
        elif not hit:
            stats["miss"] += 1
            stats["t_miss"] += dt
            miss_t.append((id(handler), m, dt))
        else:
            by_m[(id(handler), m)].append(dt)
        return y

    ops.onednn_mm = timed
    if os.environ.get("PAD"):  # prototype: every onednn_mm call at a bucketed width
        import torch

        def bucket(m):
            if m <= 8:
                return m
            step = 8 if m <= 64 else 1 << (m.bit_length() - 4)
            return -(-m // step) * step

        def padded(handler, x, bias, _t=timed):
            m = x.shape[0]
            b = bucket(m)
            if b == m:
                return _t(handler, x, bias)
            xp = x.new_empty((b, x.shape[1]))
            xp[:m] = x
            xp[m:].zero_()
            return _t(handler, xp, bias)[:m]

        ops.onednn_mm = padded

    def reqs(n, max_tokens=96):
        return [{"prompt_token_ids": p, "max_tokens": max_tokens, "ignore_eos": False, "stop_token_ids": eos}
                for p in ids[:n]]

    drive(engine, reqs(4, 16), concurrency=2, id_prefix="warm-")
    for p in range(passes):
        for k in stats:
            stats[k] = 0 if isinstance(stats[k], int) else 0.0
        miss_t.clear()
        steps, toks, t0 = 0, 0, time.perf_counter()
        for c in (1, 2, 4, 8, 16, 32, 64):
            out = drive(engine, reqs(max(16, 2 * c)), concurrency=c, id_prefix=f"p{p}c{c}-")
            steps += len(out["steps"])
            toks += sum(x["new_tokens"] for x in out["steps"])
        wall = time.perf_counter() - t0
        # a miss's extra time: against the median hit time of the same handler at the nearest M
        extra = 0.0
        for h, m, dt in miss_t:
            near = [v for (hh, mm), v in by_m.items() if hh == h and abs(mm - m) <= max(2, m // 8)]
            if near:
                ref = sorted(x for v in near for x in v)[len(sorted(x for v in near for x in v)) // 2]
                extra += max(0.0, dt - ref)
        print(f"{mode}{' PAD' if os.environ.get('PAD') else ''} {which} pass {p}: {steps} steps, {1e3 * wall / steps:.3f} ms/step, {toks / wall:.1f} tok/s; onednn_mm {stats['calls'] / steps:.1f} "
              f"calls, {1e3 * stats['t'] / steps:.3f} ms per step; first-seen M {stats['new']} calls "
              f"{1e3 * stats['t_new'] / steps:.3f} ms/step; LRU-32 misses {stats['miss']} calls "
              f"{1e3 * stats['t_miss'] / steps:.3f} ms/step (over a hit at a near M: {1e3 * extra / steps:.3f})", flush=True)


if __name__ == "__main__":
    main()
