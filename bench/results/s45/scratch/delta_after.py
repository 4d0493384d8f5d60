"""Session 45 scratch (issue #10): the verify fit after tasks, code and tasks at c = 1 (32 requests
each, one in-process adaptive engine): the slope per draft, delta (the fixed cost of a drafted
step), and what 4 and 15 drafts add to a plain step at batch 1. Old code: ``PYTHONPATH=<worktree>``.

    python bench/results/s45/scratch/delta_after.py
"""
import os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s44", "scratch"))
from _trace import rotation_engine
def main():
    from dflash_vllm.driver import drive
    engine, runner, reqs = rotation_engine()
    pol = runner.drafter.policy
    for s, c in (("tasks", 1), ("code", 1), ("tasks", 1)):
        drive(engine, reqs(s, 32), concurrency=c, id_prefix=f"{s}{c}{len(s)}-")
    cm = pol.cost
    th = cm.verify.theta()
    print("slope per draft at N=2: %.3f ms, delta %.3f ms, T_v(1, 4) - T_v(1) %.3f ms, T_v(1,15)-T_v(1) %.3f ms" % (
        cm.slope_verify(2) * 1e3, cm.delta() * 1e3, (cm.t_verify(1.0, 4.0) - cm.t_verify(1.0)) * 1e3,
        (cm.t_verify(1.0, 15.0) - cm.t_verify(1.0)) * 1e3), flush=True)
if __name__ == "__main__":
    main()
