"""Session 47 (#10): while drafting, how often the adaptive policy recomputes its optimum and why
the recomputed plan does not count as settled (in-process engine, demo pair, tasks prompts).
Per recomputation after a drafting one: the cap moved, the threshold moved by over a quarter,
both, or neither (settled); plus the time _optimum takes.

    [SET=tasks] python bench/results/s47/scratch/settle_why.py CONCURRENCY
"""
import collections
import os
import sys
import time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "s43", "scratch"))


def main():
    c = int(sys.argv[1])
    from _engine import engine_at
    from dflash_vllm.driver import drive
    engine, runner, reqs, n = engine_at("adaptive", c, os.environ.get("SET", "tasks"))
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    pol = runner.drafter.policy
    orig = pol._optimum
    why, caps, secs = collections.Counter(), collections.Counter(), [0.0, 0]

    def optimum(*a, **k):
        prev = pol._optimum_cache
        s = time.perf_counter()
        o = orig(*a, **k)
        secs[0] += time.perf_counter() - s
        secs[1] += 1
        if o is not None and prev is not None and prev.opt is not None and prev.drafts and o.k is not None and o.k.any():
            cap = o.cap != prev.opt.cap
            thr = abs(o.thr - prev.opt.thr) > 0.25 * prev.opt.thr
            why["cap+thr" if cap and thr else "cap" if cap else "thr" if thr else "same"] += 1
            if cap:
                caps[(prev.opt.cap, o.cap)] += 1
        return o
    pol._optimum = optimum
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    dt = time.perf_counter() - t0
    print(f"c={c}: {steps} steps, {1e3 * dt / steps:.2f} ms a step; _optimum {secs[1]} calls, "
          f"{1e6 * secs[0] / max(secs[1], 1):.0f} us each, {1e6 * secs[0] / steps:.0f} us a step")
    print("  after a drafting optimum:", dict(why))
    print("  cap moves:", dict(caps.most_common(8)))


if __name__ == "__main__":
    main()
