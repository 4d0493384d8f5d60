"""Scratch (session 29): the policy in simulation (tasks c=1 after the weak cells, chat c=1 after the strong cells, steady chat/tasks at c=1, 8, 64), 30 or 6 seeds x both cost tables. The variants of bench/README "Session 29" were temporary edits of AcceptanceModel.observe (an extra cut of positions 2..K on a detected shift, XDEEP = 0 or 0.25), not kept."""
import os, sys, time
sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import (_tasks_at_batch_1_after, _weak_cells, ENGINE_COST, DEMO_COST, _simulate_hist, DEMO_HIST,
                           _hidden)
from dflash_vllm.adaptive import AdaptivePolicy
t = time.time()
for name, cost in (("DEMO", DEMO_COST), ("ENGINE", ENGINE_COST)):
    xs = np.array([_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=cost) for s in range(30)])
    print(f"{name}: tasks c1 after weak: mean {xs.mean():.3f} p10 {np.percentile(xs,10):.3f}", flush=True)
    ch = []
    for seed in range(30):
        p = AdaptivePolicy(15)
        for hist, r, n, lf in (("tasks", 1, 200, 40), ("code", 64, 60, 4) if "code" in DEMO_HIST else ("tasks", 64, 60, 4)):
            _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=n, seed=seed, life=lf, **_hidden(r, cost))
        ours = _simulate_hist(p, DEMO_HIST["chat"], 1, *cost[1], steps=320, seed=seed, warm=0, life=20, **_hidden(1, cost))
        k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], 1, *cost[1], steps=320, seed=seed, warm=0, life=20, **_hidden(1, cost))
        ch.append(ours / k0)
    ch = np.array(ch)
    print(f"{name}: chat c1 after strong / K0: mean {ch.mean():.3f} p10 {np.percentile(ch,10):.3f}", flush=True)
    for r in (1, 8, 64):
        for ps in ("chat", "tasks"):
            ours = np.mean([_simulate_hist(AdaptivePolicy(15), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, **_hidden(r, cost)) for s in range(6)])
            best = max(np.mean([_simulate_hist(AdaptivePolicy(15, fixed=[k]), DEMO_HIST[ps], r, *cost[r], steps=600, seed=s, **_hidden(r, cost)) for s in range(6)]) for k in (0, 3, 7, 15))
            print(f"  {ps} c={r}: /best {ours/best:.3f}", flush=True)
print(f"{time.time()-t:.0f} s")
