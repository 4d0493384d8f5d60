"""Session 44 (issue #10), not kept: acceptance evidence that does not age with time while the
policy is dormant (probes alone would then move the curve). Simulation (the unit tests' closed
loop, DEMO_COST): chat after tasks (adaptive / K = 0, drafted steps) and tasks after chat
(adaptive / K = 15), ageing on and off. Needs the experiment's patch, as it was:
``AcceptanceModel.tick(num_decode, age=True)`` applying ``self.decay`` only when ``age``;
``AdaptivePolicy.AGE_WHILE_DORMANT = False``; ``plan`` ticking with
``age=self.AGE_WHILE_DORMANT or not self.dormant`` and ``idle_step`` with
``age=self.AGE_WHILE_DORMANT``.

    python bench/results/s44/scratch/sim_dormant.py
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from tests.unit.test_adaptive import _simulate_hist, DEMO_HIST, DEMO_COST
from dflash_vllm.adaptive import AdaptivePolicy
import types
for age in (True, False):
    AdaptivePolicy.AGE_WHILE_DORMANT = age
    for r in (1, 4, 8):
        tv, td = DEMO_COST[r if r != 4 else 8]
        out = []
        for seed in (0, 1, 2):
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["tasks"], r, tv, td, steps=300, seed=seed, life=4)
            n = [0]
            orig = p.plan
            def plan(*a, **k):
                kk, q = orig(*a, **k)
                n[0] += q > 0
                return kk, q
            p.plan = plan
            ours = _simulate_hist(p, DEMO_HIST["chat"], r, tv, td, steps=2000, seed=seed + 1, warm=0, life=20)
            k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], r, tv, td, steps=2000, seed=seed + 1, warm=0, life=20)
            out.append((ours / k0, n[0]))
        # then back to tasks: how fast it comes back
        back = []
        for seed in (0, 1, 2):
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["chat"], r, tv, td, steps=1500, seed=seed, life=20)
            ours = _simulate_hist(p, DEMO_HIST["tasks"], r, tv, td, steps=260 if r == 1 else 60, seed=seed + 1, warm=0, life=4)
            best = _simulate_hist(AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], r, tv, td, steps=260 if r == 1 else 60, seed=seed + 1, warm=0, life=4)
            back.append(ours / best)
        print(f"age_while_dormant={age} r={r}: chat after tasks adaptive/K=0 {np.mean([o[0] for o in out]):.3f} drafted steps {[o[1] for o in out]} | tasks after chat / K=15 {np.mean(back):.3f}")
