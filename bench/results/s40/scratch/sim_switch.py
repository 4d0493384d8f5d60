"""Weak cell at batch 1 right after a strong cell at batch 64 (chat c=1 after code c=64 in the bench):
adaptive / K=0 on the weak cell, and drafted steps in it; then tasks at batch 1 again (session 40).

    python bench/results/s40/scratch/sim_switch.py [SEEDS]
    python bench/results/s40/scratch/withkeep.py bench/results/s40/scratch/sim_switch.py 20   (SHIFT_KEEP=0.1 ...)
"""
import sys
sys.path.insert(0, "tests/unit")
import numpy as np
import dflash_vllm.adaptive as ad
from test_adaptive import DEMO_COST, DEMO_HIST, ENGINE_COST, _hidden, _simulate_hist
SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for name, cost in (("DEMO", DEMO_COST), ("ENGINE", ENGINE_COST)):
    ratios, drafted, early = [], [], []
    after = []
    for seed in range(SEEDS):
        pol = ad.AdaptivePolicy(15)
        _simulate_hist(pol, DEMO_HIST["tasks"], 1, *cost[1], steps=200, seed=seed, warm=0, life=14, **_hidden(1, cost))
        _simulate_hist(pol, DEMO_HIST["tasks"], 64, *cost[64], steps=48, seed=seed, warm=0, life=4, **_hidden(64, cost))
        log = []
        orig = pol.plan
        def plan(*a, **k):
            kk, q = orig(*a, **k); log.append(q); return kk, q
        pol.plan = plan
        kw = dict(steps=320, seed=seed + 1000, warm=0, life=20, **_hidden(1, cost))
        a = _simulate_hist(pol, DEMO_HIST["chat"], 1, *cost[1], **kw)
        pol.plan = orig
        b = _simulate_hist(ad.AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], 1, *cost[1], **kw)
        ratios.append(a / b); drafted.append(sum(q > 0 for q in log)); early.append(sum(q > 0 for q in log[:30]))
        # then tasks at batch 1 again (the policy must come back)
        kw = dict(steps=250, seed=seed + 2000, warm=0, life=14, **_hidden(1, cost))
        o = _simulate_hist(pol, DEMO_HIST["tasks"], 1, *cost[1], **kw)
        be = _simulate_hist(ad.AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], 1, *cost[1], **kw)
        after.append(o / be)
    print(f"{name}: chat c=1 after tasks c=64: adaptive/K0 {np.exp(np.mean(np.log(ratios))):.4f} (p10 {np.percentile(ratios,10):.3f}); "
          f"drafted steps {np.mean(drafted):.1f}, in first 30 {np.mean(early):.1f}; then tasks c=1 adaptive/K15 {np.mean(after):.3f} (p10 {np.percentile(after,10):.3f})")
