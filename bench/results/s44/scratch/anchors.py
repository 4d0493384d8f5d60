"""Session 44 (issue #10): plain-step anchors while drafting, in-process. Tasks at c = 1 (or SET,
CONCURRENCY) on an adaptive engine after a warm-up third; counts the plans of no drafts that the
policy made while its optimum drafted (anchors and pauses), the drafted plans, and tok/s.
Old code: ``PYTHONPATH=<worktree>``.

    [SET=tasks] python bench/results/s44/scratch/anchors.py [CONCURRENCY]
"""
import os
import sys
sys.path.insert(0, os.path.dirname(__file__))
from _trace import trace_plans, warm_engine  # noqa: E402


def main():
    c = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    import dflash_vllm
    from dflash_vllm.driver import drive
    engine, runner, reqs, n = warm_engine("adaptive", c, "tasks")
    pol = runner.drafter.policy
    rec = []
    trace_plans(pol, lambda req_ids, k, q, why: rec.append((q, pol.dormant)))
    res = drive(engine, reqs[n:], concurrency=c, id_prefix="m-")
    toks = sum(x["new_tokens"] for x in res["steps"])
    anchors = sum(1 for q, d in rec if q == 0 and not d)
    print(f"{os.path.dirname(dflash_vllm.__file__)}: SET={os.environ.get('SET', 'tasks')} c={c}: "
          f"{len(res['steps'])} steps, {toks / res['wall_s']:.0f} tok/s, plans {len(rec)}, drafted {sum(1 for q, _ in rec if q)}, "
          f"plain while drafting pays {anchors}, dormant {sum(1 for _, d in rec if d)}")


if __name__ == "__main__":
    main()
