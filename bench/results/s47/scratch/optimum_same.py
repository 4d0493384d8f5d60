"""Session 47 (#10): the Python-float pricing of AdaptivePolicy._optimum gives the same optimum as
the numpy pricing before it. Runs the rotation simulation (sim_rotation.py: tasks and chat at
c = 1..64, REPEATS, SEEDS) and, at every optimum the policy computes, the old method (OLD: the
adaptive.py before the change) on the same state; counts the optima whose fields differ at all.

    python bench/results/s47/scratch/optimum_same.py OLD_ADAPTIVE_PY [SEEDS] [REPEATS]
"""
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "s46", "scratch"))
import sim_rotation as S  # noqa: E402
from dflash_vllm.adaptive import AdaptivePolicy  # noqa: E402

spec = importlib.util.spec_from_file_location("dflash_vllm._old_adaptive", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = old
spec.loader.exec_module(old)
from dflash_vllm.adaptive import CostModel  # noqa: E402
if not hasattr(CostModel, "t_verify_drafted"):  # (the old method's numpy pricing, gone since)
    CostModel.t_verify_drafted = old.CostModel.t_verify_drafted
CostModel.t_draft = old.CostModel.t_draft  # (the old method passes t_draft a `terms` argument; the same line)
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
segs = []
for _ in range(reps):
    segs += [("tasks", r, s, 10) for r, s in S.TASK_STEPS.items()] + [("chat", r, s, 60) for r, s in S.CHAT_STEPS.items()]
same = differ = 0
for seed in range(seeds):
    p = AdaptivePolicy(15)
    new_fn = p._optimum

    def both(*a, **k):
        global same, differ
        o_new, o_old = new_fn(*a, **k), old.AdaptivePolicy._optimum(p, *a, **k)
        if o_new is None or o_old is None:
            ok = o_new is None and o_old is None
        else:
            ok = all((np.array_equal(x, y) if isinstance(x, np.ndarray) or isinstance(y, np.ndarray) else x == y)
                     for x, y in zip(o_new, o_old))
        same, differ = same + ok, differ + (not ok)
        if not ok and differ <= 3:
            print("differ:", o_new, o_old)
        return o_new
    p._optimum = both
    S.run(p, segs, seed)
print(f"optima compared: {same + differ}, identical {same}, different {differ}")
