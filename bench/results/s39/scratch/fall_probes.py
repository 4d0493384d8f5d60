"""Scratch (session 39, issue #10): the probes after a fall of the load, simulated: a policy dormant at
batch 64 (first drafts accepted ~1 in 5, the door), then chat at batch 1 for 300 steps; prints the plan
per step (P probe, # drafted, . plain). 9aeb299 gave probes at 5, 17, 48; e65e7ce one at 5.

    python bench/results/s39/scratch/fall_probes.py
"""
import sys; sys.path.insert(0,"tests/unit")
import numpy as np
from test_adaptive import _closed_loop, _simulate_hist, _hidden, DEMO_COST, DEMO_HIST
from dflash_vllm.adaptive import AdaptivePolicy
p = AdaptivePolicy(15)
rng = np.random.default_rng(0)
tv, td = DEMO_COST[64]
_closed_loop(p, 64, lambda g, k: np.minimum(rng.geometric(0.8, 64) - 1, k), lambda n, _r: tv(n), td,
             steps=800, warm=0, hidden_draft=tv(64), transient=0.5 * tv(64), sentinels=4, life=4)
log = []
plan = p.plan
def rec(ids, d, **kw):
    k, q = plan(ids, d, **kw); log.append("P" if q and p.dormant else ("#" if q else ".")); return k, q
p.plan = rec
tv1, td1 = DEMO_COST[1]
_simulate_hist(p, DEMO_HIST["chat"], 1, tv1, td1, steps=300, warm=0, life=20, **_hidden(1))
print("".join(log)); print("probes", log.count("P"), "bucket", p._probe_bucket)
