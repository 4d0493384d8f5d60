"""Session 44 (issue #10): plain-step anchors' spacing, one step's loss per pair (before d24fda3)
against both steps' (d24fda3), in the unit tests' simulator: adaptive over K = 15 (tasks) or
K = 0 (chat) at DEMO_COST, tasks with ENGINE_COST and the unseen costs, and tasks at batch 1 after
the weak cells. Needs the experiment's switch, as it was: a module constant
``ANCHOR_PAIR`` in dflash_vllm/adaptive.py and ``int(ANCHOR_PAIR * (1.0 - g0 / best_g) / budget)``
for the spacing in ``_choose`` (1.0: before, 2.0: now).

    python bench/results/s44/scratch/anchor_sim.py
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
import tests.unit.test_adaptive as T
from dflash_vllm.adaptive import AdaptivePolicy
import dflash_vllm.adaptive as A
for pairs in (1.0, 2.0):
    A.ANCHOR_PAIR = pairs
    out = []
    for hist, r in (("tasks", 1), ("tasks", 8), ("tasks", 64), ("chat", 1), ("chat", 64)):
        tv, td = T.DEMO_COST[r]
        v = np.mean([T._simulate_hist(AdaptivePolicy(15), T.DEMO_HIST[hist], r, tv, td, seed=s) for s in (0, 1, 2)])
        k15 = np.mean([T._simulate_hist(AdaptivePolicy(15, fixed=[15 if hist == "tasks" else 0]), T.DEMO_HIST[hist], r, tv, td, seed=s) for s in (0, 1, 2)])
        out.append(f"{hist}{r} {v / k15:.3f}")
    ec = []
    for r in (1, 8):
        cost = T.ENGINE_COST[r]
        ours = np.mean([T._simulate_hist(AdaptivePolicy(15), T.DEMO_HIST["tasks"], r, *cost, steps=800, seed=s, **T._hidden(r, T.ENGINE_COST)) for s in range(4)])
        k15 = np.mean([T._simulate_hist(AdaptivePolicy(15, fixed=[15]), T.DEMO_HIST["tasks"], r, *cost, steps=800, seed=s, **T._hidden(r, T.ENGINE_COST)) for s in range(4)])
        ec.append(f"engine-cost tasks{r} {ours / k15:.3f}")
    wc = np.mean([T._tasks_at_batch_1_after(T._weak_cells(s), s, steps=250, life=14, hidden=True, cost=T.ENGINE_COST) for s in range(12)])
    print(f"pair factor {pairs}: (over K=15 for tasks, K=0 for chat) " + " ".join(out) + " | " + " ".join(ec) + f" | tasks1 after weak {wc:.3f}", flush=True)
