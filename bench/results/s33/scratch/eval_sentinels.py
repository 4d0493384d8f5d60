"""Scratch (session 33): session 29's simulation check (scratch s29/scratch/eval.py) with the
proposer's door in the loop (``sentinels``: requests arriving while the optimum is "no drafts"
never draft but the first 4), for the code on PYTHONPATH (old code: a worktree of the commit
before). Usage: python eval_sentinels.py SENTINELS [SEEDS]"""
import inspect, sys, time
sys.path.insert(0, "tests/unit")
import numpy as np
import dflash_vllm.adaptive as ad
from test_adaptive import _weak_cells, ENGINE_COST, DEMO_COST, _simulate_hist, DEMO_HIST, _hidden

AP = ad.AdaptivePolicy
if len(inspect.signature(AP.on_draft_time).parameters) == 3:  # the old signature: (seconds, block_tokens)
    _old = AP.on_draft_time
    AP.on_draft_time = lambda self, s, b, r=None: _old(self, s, b)
if "num_decode" not in inspect.signature(ad.AdaptivePolicy.plan).parameters:  # the old signature
    _plan = ad.AdaptivePolicy.plan
    ad.AdaptivePolicy.plan = lambda self, *a, num_decode=None, **k: _plan(self, *a, **k)
print(ad.__file__)
SENT = int(sys.argv[1])
SEEDS = int(sys.argv[2]) if len(sys.argv) > 2 else 30


def extra(r, cost):
    return dict(_hidden(r, cost), sentinels=SENT)


def after(cells, seed, steps, life, cost):
    p = AP(15)
    for hist, r, n, lf, s in cells:
        _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=n, seed=s, life=lf, **extra(r, cost))
    ours = _simulate_hist(p, DEMO_HIST["tasks"], 1, *cost[1], steps=steps, seed=seed, warm=0, life=life, **extra(1, cost))
    best = _simulate_hist(AP(15, fixed=[15]), DEMO_HIST["tasks"], 1, *cost[1], steps=steps, seed=seed, warm=0,
                          life=life, **extra(1, cost))
    return ours / best


t = time.time()
for name, cost in (("DEMO", DEMO_COST), ("ENGINE", ENGINE_COST)):
    xs = np.array([after(_weak_cells(s), s, 250, 14, cost) for s in range(SEEDS)])
    print(f"{name}: tasks c1 after weak: mean {xs.mean():.3f} p10 {np.percentile(xs, 10):.3f}", flush=True)
    ch = []
    for seed in range(SEEDS):
        p = AP(15)
        for hist, r, n, lf in (("tasks", 1, 200, 40), ("tasks", 64, 60, 4)):
            _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=n, seed=seed, life=lf, **extra(r, cost))
        ours = _simulate_hist(p, DEMO_HIST["chat"], 1, *cost[1], steps=320, seed=seed, warm=0, life=20, **extra(1, cost))
        k0 = _simulate_hist(AP(15, fixed=[0]), DEMO_HIST["chat"], 1, *cost[1], steps=320, seed=seed, warm=0, life=20,
                            **extra(1, cost))
        ch.append(ours / k0)
    ch = np.array(ch)
    print(f"{name}: chat c1 after strong / K0: mean {ch.mean():.3f} p10 {np.percentile(ch, 10):.3f}", flush=True)
    for r in (1, 8, 64):
        for ps in ("chat", "tasks"):
            kw = extra(r, cost)
            ours = np.mean([_simulate_hist(AP(15), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, life=20, **kw) for s in range(6)])
            best = max(np.mean([_simulate_hist(AP(15, fixed=[k]), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, life=20, **kw)
                                for s in range(6)]) for k in (0, 3, 7, 15))
            print(f"  {ps} c={r}: /best {ours / best:.3f}", flush=True)
print(f"{time.time() - t:.0f} s")
