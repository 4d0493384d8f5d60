"""Session 44 (issue #10): the simulated weak cells, then tasks at batch 1 (the test
``test_engine_costs_tasks_at_batch_1_after_the_weak_cells_matches_the_best_fixed_k``), over N seeds:
adaptive / K = 15 with the door as before (DOOR_BELOW = 10: closed whenever dormant) and with
``AdaptivePolicy.closes_door``'s margin (0.9).

    python bench/results/s44/scratch/door_seeds.py [N]
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from tests.unit.test_adaptive import _tasks_at_batch_1_after, _weak_cells, ENGINE_COST
from dflash_vllm.adaptive import AdaptivePolicy
n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
for below in (10.0, 0.9):
    AdaptivePolicy.DOOR_BELOW = below
    r = [_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=ENGINE_COST) for s in range(n)]
    print(f"DOOR_BELOW={below}: mean {np.mean(r):.3f} first6 {np.mean(r[:6]):.3f} min {min(r):.3f} per seed {' '.join(f'{x:.2f}' for x in r)}", flush=True)
