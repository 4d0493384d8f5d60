"""Scratch (session 28): microseconds per call of the policy's methods in simulation (tasks, ENGINE_COST). Usage: python time_policy.py BATCH (from the repository root)."""
import sys, time
sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import _simulate_hist, DEMO_HIST, ENGINE_COST
import dflash_vllm.adaptive as A
r = int(sys.argv[1]) if len(sys.argv) > 1 else 1
T = {}
def timeit(cls, name):
    orig = getattr(cls, name)
    def timed(self, *a, **k):
        t = time.perf_counter(); x = orig(self, *a, **k); T.setdefault(name, []).append(time.perf_counter() - t); return x
    setattr(cls, name, timed)
for n in ("_optimum", "plan", "on_step", "_choose"): timeit(A.AdaptivePolicy, n)
timeit(A.AcceptanceModel, "observe"); timeit(A.AcceptanceModel, "survival"); timeit(A.AcceptanceModel, "tick")
p = A.AdaptivePolicy(15)
_simulate_hist(p, DEMO_HIST["tasks"], r, *ENGINE_COST[r], steps=300, seed=0)
T.clear()
_simulate_hist(p, DEMO_HIST["tasks"], r, *ENGINE_COST[r], steps=600, seed=1, warm=0)
for k, v in T.items(): print(f"{k:12s} calls {len(v):4d} mean {1e6*np.mean(v):7.1f} us  per step {1e6*sum(v)/600:7.1f} us")
