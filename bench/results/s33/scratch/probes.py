"""Scratch (session 33): when the policy probes across the weak cells and the tasks c = 1 cell
(sentinels in the loop). Usage: python probes.py DEMO|ENGINE SEED"""
import sys
sys.path.insert(0, "tests/unit")
import numpy as np
import inspect
import dflash_vllm.adaptive as ad
if len(inspect.signature(ad.AdaptivePolicy.on_draft_time).parameters) == 3:
    _old = ad.AdaptivePolicy.on_draft_time
    ad.AdaptivePolicy.on_draft_time = lambda self, s, b, r=None: _old(self, s, b)
if "num_decode" not in inspect.signature(ad.AdaptivePolicy.plan).parameters:  # the old signature
    _plan = ad.AdaptivePolicy.plan
    ad.AdaptivePolicy.plan = lambda self, *a, num_decode=None, **k: _plan(self, *a, **k)
from test_adaptive import _weak_cells, ENGINE_COST, DEMO_COST, _simulate_hist, DEMO_HIST, _hidden
AP = ad.AdaptivePolicy
cost = {"DEMO": DEMO_COST, "ENGINE": ENGINE_COST}[sys.argv[1]]
seed = int(sys.argv[2])
ex = lambda r: dict(_hidden(r, cost), sentinels=4)
p = AP(15)
cells = list(_weak_cells(seed)) + [("tasks", 1, 250, 14, seed)]
for ci, (hist, r, st, lf, s) in enumerate(cells):
    plan = p.plan
    ev, nd = [], [0]
    def traced(ids, dec, *a, **k):
        before = p._probes
        kq = plan(ids, dec, *a, **k)
        nd[0] += kq[1] > 0
        c = p._optimum_cache
        if p._probes != before:
            ev.append(f"{p.step}:probe q={kq[1]} n={int(np.count_nonzero(kq[0]))} bkt={p._probe_bucket} lvl={p._level:.1f} loss={ {b: round(v, 2) for b, v in p.probe_loss.items()} }")
        return kq
    p.plan = traced
    _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=st, seed=s, life=lf, **ex(r))
    del p.plan
    print(f"== {hist} c={r} {st} steps: {nd[0]} drafted, {len(ev)} probes; last: {ev[-3:]}")
    print(f"   end: level {p._level:.2f} probe bucket {p._probe_bucket} steps_since_draft {p.steps_since_draft} dormant {p.dormant}")
