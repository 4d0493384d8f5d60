"""Scratch (session 28): the policy in simulation: tasks at batch 1 after the weak cells over 30 seeds, and chat / tasks at batch 1, 8, 64 against the best fixed K, on DEMO_COST and ENGINE_COST (tests/unit/test_adaptive.py). Run from the repository root."""
import sys
sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import _tasks_at_batch_1_after, _weak_cells, ENGINE_COST, DEMO_COST, _simulate_hist, DEMO_HIST, _hidden
from dflash_vllm.adaptive import AdaptivePolicy
out = {}
for name, cost in (("DEMO", DEMO_COST), ("ENGINE", ENGINE_COST)):
    xs = np.array([_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=cost) for s in range(30)])
    print(f"{name}: tasks c1 after weak: mean {xs.mean():.3f} p10 {np.percentile(xs,10):.3f}")
    for r in (1, 8, 64):
        for ps in ("chat", "tasks"):
            ours = np.mean([_simulate_hist(AdaptivePolicy(15), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, **_hidden(r, cost)) for s in range(6)])
            best = max(np.mean([_simulate_hist(AdaptivePolicy(15, fixed=[k]), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, **_hidden(r, cost)) for s in range(6)]) for k in (0, 3, 7, 15))
            k0 = np.mean([_simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, **_hidden(r, cost)) for s in range(6)])
            print(f"  {ps} c={r}: /best {ours/best:.3f} /K0 {ours/k0:.3f}")
