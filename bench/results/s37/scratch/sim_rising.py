"""Simulation (session 37, issue #10): the full check's weak cells in order (chat, then free, at
c = 1, 8, 64, the batches the tests' cost tables have; the bench's steps per cell and repeat;
the demo histograms have no free set: chat twice), the door and the engine's hidden
costs in the loop (tests/unit/test_adaptive.py's _hidden), adaptive against K = 0 run through
the same sequence; then tasks at batch 1 right after (adaptive / K = 15, as
test_a_probe_that_paid_for_itself_brings_the_next_one_soon). For the code on PYTHONPATH.

    python bench/results/s37/scratch/sim_rising.py [SEEDS]
"""
import sys

sys.path.insert(0, "tests/unit")
import numpy as np  # noqa: E402

import dflash_vllm.adaptive as ad  # noqa: E402
from test_adaptive import DEMO_COST, DEMO_HIST, ENGINE_COST, _hidden, _simulate_hist  # noqa: E402

SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
STEPS = {1: 320, 8: 48, 64: 48}  # the batches the cost tables have
LIFE = {1: 20, 8: 12, 64: 4}
print(ad.__file__)
for name, cost in (("DEMO", DEMO_COST), ("ENGINE", ENGINE_COST)):
    per_cell = {}
    after = []
    for seed in range(SEEDS):
        pol, k0 = ad.AdaptivePolicy(15), ad.AdaptivePolicy(15, fixed=[0])
        for j, ps in enumerate(("chat", "chat")):
            for r in STEPS:
                kw = dict(steps=STEPS[r], seed=seed * 100 + r, warm=0, life=LIFE[r], **_hidden(r, cost))
                a = _simulate_hist(pol, DEMO_HIST[ps], r, *cost[r], **kw)
                b = _simulate_hist(k0, DEMO_HIST[ps], r, *cost[r], **kw)
                per_cell.setdefault((f"{ps}#{j + 1}", r), []).append(a / b)
        kw = dict(steps=250, seed=seed, warm=0, life=14, **_hidden(1, cost))
        ours = _simulate_hist(pol, DEMO_HIST["tasks"], 1, *cost[1], **kw)
        best = _simulate_hist(ad.AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], 1, *cost[1], **kw)
        after.append(ours / best)
    allr = [x for v in per_cell.values() for x in v]
    print(f"{name}: weak cells adaptive / K=0 pooled {np.exp(np.mean(np.log(allr))):.4f}; per cell "
          + ", ".join(f"{ps} c={r} {np.mean(v):.3f}" for (ps, r), v in per_cell.items()))
    print(f"{name}: tasks c=1 after them, adaptive / K=15 mean {np.mean(after):.3f} p10 {np.percentile(after, 10):.3f}")
