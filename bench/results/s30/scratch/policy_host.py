"""Scratch (session 30): the policy's host time per step while drafting does not pay (chat, ENGINE_COST, batch argv[1]): plan and on_step, wall clock, then cProfile by own time."""
import sys, time, cProfile, pstats; sys.path.insert(0, "tests/unit")
import numpy as np
from test_adaptive import _simulate_hist, DEMO_HIST, ENGINE_COST, _hidden
from dflash_vllm.adaptive import AdaptivePolicy
r = int(sys.argv[1]) if len(sys.argv) > 1 else 1
p = AdaptivePolicy(15)
_simulate_hist(p, DEMO_HIST["chat"], r, *ENGINE_COST[r], steps=600, seed=0, life=20, **_hidden(r, ENGINE_COST))
calls = [0, 0.0, 0.0]
orig = p.plan
def plan(*a, **k):
    s = time.perf_counter(); res = orig(*a, **k); calls[1] += time.perf_counter() - s; calls[0] += 1; return res
p.plan = plan
on = p.on_step
def on_step(*a, **k):
    s = time.perf_counter(); res = on(*a, **k); calls[2] += time.perf_counter() - s; return res
p.on_step = on_step
_simulate_hist(p, DEMO_HIST["chat"], r, *ENGINE_COST[r], steps=2000, seed=1, life=20, warm=0, **_hidden(r, ENGINE_COST))
print(f"batch {r}: plan {1e6*calls[1]/calls[0]:.1f} us, on_step {1e6*calls[2]/calls[0]:.1f} us per step over {calls[0]} steps")
pr = cProfile.Profile(); pr.enable()
_simulate_hist(p, DEMO_HIST["chat"], r, *ENGINE_COST[r], steps=2000, seed=2, life=20, warm=0, **_hidden(r, ENGINE_COST))
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(14)
