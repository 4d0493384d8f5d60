"""Session 46 (issue #10): in the rotation simulation (sim_rotation.py), tasks at batch 1 after one
repeat of tasks and chat at c = 1..64: the drafts planned per step (q), adaptive against K = 15, and
the first 50 steps again with g(1..5), G/G0 of the optimum and the shifts counted.

    python bench/results/s46/scratch/t1_trace.py [SEED]
"""
import sys, os, numpy as np
sys.path.insert(0, "bench/results/s46/scratch")

import sim_rotation as S
from dflash_vllm.adaptive import AdaptivePolicy
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
p = AdaptivePolicy(15)
segs = [("tasks", r, s, 10) for r, s in S.TASK_STEPS.items()] + [("chat", r, s, 60) for r, s in S.CHAT_STEPS.items()]
S.run(p, segs, seed)
orig = p.plan; ks = []
def plan(*a, **k):
    kk, q = orig(*a, **k); ks.append(int(q)); return kk, q
p.plan = plan
res = S.run(p, [("tasks", 1, 70, 10)], seed + 7)
best = S.run(AdaptivePolicy(15, fixed=[15]), [("tasks", 1, 70, 10)], seed + 7)
print("q per step:", ks)
print("adaptive", res[0][0]/res[0][1], "K15", best[0][0]/best[0][1], "ratio", (res[0][0]/res[0][1])/(best[0][0]/best[0][1]))
# again, with the model after each step
p = AdaptivePolicy(15)
S.run(p, segs, seed)
orig = p.plan; log = []
def plan(*a, **k):
    kk, q = orig(*a, **k)
    o = p.optimum
    log.append((int(q), [round(float(x), 2) for x in p.acceptance.rates()[:5]], None if o is None else (round(o.g / max(o.g0, 1e-9), 2)), p.acceptance.shifts))
    return kk, q
p.plan = plan
S.run(p, [("tasks", 1, 50, 10)], seed + 7)
for i, l in enumerate(log[:50]):
    print(i, l)
