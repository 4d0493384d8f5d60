"""Scratch (session 30): 24 simulated runs of the policy (chat/tasks at batch 1, 8, 64, both cost tables; tasks at batch 1 after the weak cells, 3 seeds) printed at full precision, to check that a speed-up of the policy leaves every plan the same (diff the output before and after)."""
import sys; sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import _simulate_hist, DEMO_HIST, ENGINE_COST, DEMO_COST, _hidden, _tasks_at_batch_1_after, _weak_cells
from dflash_vllm.adaptive import AdaptivePolicy
out = []
for cost in (ENGINE_COST, DEMO_COST):
    for r in (1, 8, 64):
        for ps in ("chat", "tasks"):
            p = AdaptivePolicy(15)
            out.append(_simulate_hist(p, DEMO_HIST[ps], r, *cost[r], steps=500, seed=3, life=20, **_hidden(r, cost)))
            out.append((p._probes, p.step, int(p.steps_since_draft)))
    for s in range(3):
        out.append(_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=cost))
print(repr(out))
