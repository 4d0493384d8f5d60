"""Session 44 (issue #10), not kept: a larger margin to leave "no drafts" than to stay drafting
(hysteresis). Simulation (ENGINE_COST, the engine's unseen costs): chat after tasks, tasks after
chat, and tasks at batch 1 after the weak cells, per margin given. Needs the experiment's patch,
as it was: ``AdaptivePolicy.ENTER_MARGIN`` (class attribute, 0.01), and in ``_choose``
``margin = self.ENTER_MARGIN if c is not None and c.opt is not None and not c.drafts else
self.margin`` in place of ``self.margin`` where ``drafts`` is decided.

    python bench/results/s44/scratch/sim_enter.py 0.01 0.1 0.2
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from tests.unit.test_adaptive import _simulate_hist, DEMO_HIST, DEMO_COST, ENGINE_COST, _tasks_at_batch_1_after, _weak_cells, _hidden
from dflash_vllm.adaptive import AdaptivePolicy
for em in [float(x) for x in sys.argv[1:]]:
    AdaptivePolicy.ENTER_MARGIN = em
    out = []
    for r in (1, 8, 64):
        cost = ENGINE_COST[r]
        turn, back = [], []
        for seed in range(6):
            h = _hidden(r, ENGINE_COST)
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=300, seed=seed, life=4, **h)
            n = 900 if r == 1 else 150
            ours = _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=n, seed=seed + 1, warm=0, life=20, **h)
            k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], r, *cost, steps=n, seed=seed + 1, warm=0, life=20, **h)
            turn.append(ours / k0)
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=1500, seed=seed, life=20, **h)
            n = 260 if r == 1 else 60
            ours = _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4, **h)
            fx = {k: _simulate_hist(AdaptivePolicy(15, fixed=[k]), DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4, **h) for k in (0, 3, 7, 15)}
            back.append(ours / max(fx.values()))
        out.append(f"r={r}: chat after tasks / K=0 {np.mean(turn):.3f}, tasks after chat / best K {np.mean(back):.3f}")
    wc = np.mean([_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=ENGINE_COST) for s in range(12)])
    print(f"enter margin {em}: " + " | ".join(out) + f" | tasks1 after weak cells {wc:.3f}", flush=True)
