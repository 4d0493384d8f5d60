"""Scratch (session 33): tasks c = 1 after the weak cells, per seed, sentinels in the loop; with
TRACE, the drafted steps per 25-step window of the tasks cell and the policy's T_d(16, 1) price.
Usage: python perseed.py DEMO|ENGINE SEEDS [TRACE_SEED]"""
import inspect, sys
sys.path.insert(0, "tests/unit")
sys.path.insert(0, "bench/results/s33/scratch")
import numpy as np
import dflash_vllm.adaptive as ad
from test_adaptive import _weak_cells, ENGINE_COST, DEMO_COST, _simulate_hist, DEMO_HIST, _hidden
AP = ad.AdaptivePolicy
old = len(inspect.signature(AP.on_draft_time).parameters) == 3
if old:
    _old = AP.on_draft_time
    AP.on_draft_time = lambda self, s, b, r=None: _old(self, s, b)
if "num_decode" not in inspect.signature(ad.AdaptivePolicy.plan).parameters:  # the old signature
    _plan = ad.AdaptivePolicy.plan
    ad.AdaptivePolicy.plan = lambda self, *a, num_decode=None, **k: _plan(self, *a, **k)
cost = {"DEMO": DEMO_COST, "ENGINE": ENGINE_COST}[sys.argv[1]]
n = int(sys.argv[2])
trace = int(sys.argv[3]) if len(sys.argv) > 3 else None
ex = lambda r: dict(_hidden(r, cost), sentinels=4)
out = []
for seed in range(n) if trace is None else [trace]:
    p = AP(15)
    for hist, r, st, lf, s in _weak_cells(seed):
        _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=st, seed=s, life=lf, **ex(r))
    if trace is not None:
        plan = p.plan
        qs = []
        def traced(*a, **k):
            kq = plan(*a, **k)
            td = float(p.cost.t_draft(16) if old else p.cost.t_draft(16, 1))
            qs.append((kq[1], td, float(p.acceptance.survival(a[0][:1])[0, 0])))
            return kq
        p.plan = traced
    ours = _simulate_hist(p, DEMO_HIST["tasks"], 1, *cost[1], steps=250, seed=seed, warm=0, life=14, **ex(1))
    best = _simulate_hist(AP(15, fixed=[15]), DEMO_HIST["tasks"], 1, *cost[1], steps=250, seed=seed, warm=0, life=14, **ex(1))
    out.append(ours / best)
    if trace is not None:
        for w in range(0, len(qs), 25):
            win = qs[w:w + 25]
            print(f"steps {w:3d}: drafted {sum(q > 0 for q, _, _ in win):2d}/{len(win)} T_d(16,1) {1e3 * win[-1][1]:.2f} ms s1 {win[-1][2]:.2f}")
print(" ".join(f"{x:.2f}" for x in out), f"mean {np.mean(out):.3f}")
