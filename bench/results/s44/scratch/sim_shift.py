"""Session 44 (issue #10), not kept: AcceptanceModel's shift_keep (the old evidence kept after a
change of workload) at 0.25 (shipped), 0.1 and 0.05, in the simulation (ENGINE_COST): chat after
tasks (adaptive / K = 0) and tasks after chat (adaptive / K = 15), batch 1 and 8, 8 seeds.

    python bench/results/s44/scratch/sim_shift.py
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from tests.unit.test_adaptive import _simulate_hist, DEMO_HIST, DEMO_COST, ENGINE_COST
from dflash_vllm.adaptive import AdaptivePolicy, AcceptanceModel
import dflash_vllm.adaptive as A
orig_init = AcceptanceModel.__init__
for keep in (0.25, 0.1, 0.05):
    def init(self, *a, _k=keep, **kw):
        kw["shift_keep"] = _k
        orig_init(self, *a, **kw)
    AcceptanceModel.__init__ = init
    res = {}
    for r in (1, 8):
        cost = ENGINE_COST[r]
        turn, back = [], []
        for seed in range(8):
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=300, seed=seed, life=4)
            ours = _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=900 if r == 1 else 150, seed=seed + 1, warm=0, life=20)
            k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], r, *cost, steps=900 if r == 1 else 150, seed=seed + 1, warm=0, life=20)
            turn.append(ours / k0)
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=1500, seed=seed, life=20)
            n = 260 if r == 1 else 60
            ours = _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4)
            best = _simulate_hist(AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4)
            back.append(ours / best)
        res[r] = (np.mean(turn), np.mean(back))
    print(f"shift_keep {keep}: " + " | ".join(f"r={r}: chat after tasks / K=0 {a:.3f}, tasks after chat / K=15 {b:.3f}" for r, (a, b) in res.items()), flush=True)
AcceptanceModel.__init__ = orig_init
