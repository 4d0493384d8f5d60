"""Scratch (session 33): the idle window with the door in the simulation: every plan the same with
windows and without (``_idle_window`` returning 0), over the weak cells then tasks at batch 1
and a batch wandering 1..40, 6 seeds, both cost tables. Prints the number of plans compared and
the first difference, if any."""
import sys
sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import _simulate_hist, DEMO_HIST, ENGINE_COST, DEMO_COST, _hidden, _weak_cells
from dflash_vllm.adaptive import AdaptivePolicy


def run(seed, cost, windows):
    p = AdaptivePolicy(15)
    if not windows:
        p._idle_window = lambda *a: 0
    plans, idle = [], [0]
    plan, step = p.plan, p.idle_step
    p.plan = lambda *a, **k: (lambda kq: (plans.append((int(kq[1]), int(kq[0].sum()))), kq)[1])(plan(*a, **k))
    p.idle_step = lambda *a: (lambda ok: (idle.__setitem__(0, idle[0] + ok), ok)[1])(step(*a))
    cells = list(_weak_cells(seed)) + [("tasks", 1, 250, 14, seed), ("chat", 8, 200, 6, seed), ("chat", 32, 100, 5, seed),
                                      ("chat", 5, 300, 10, seed), ("tasks", 1, 150, 14, seed + 1)]
    for hist, r, st, lf, s in cells:
        c = cost[r] if r in cost else cost[8]
        _simulate_hist(p, DEMO_HIST[hist], r, *c, steps=st, seed=s, life=lf, **_hidden(r if r in cost else 8, cost))
    return plans, idle[0]


n = 0
for cost in (DEMO_COST, ENGINE_COST):
    for seed in range(6):
        a, _ = run(seed, cost, False)
        b, idle = run(seed, cost, True)
        n += len(a)
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            print(f"seed {seed}: plans differ at {i}: {a[i]} vs {b[i]}")
        else:
            print(f"seed {seed}: {len(a)} plans identical, {idle} idle steps")
print(n, "plans compared")
