"""Session 44 (issue #10): the full check's chat c = 1 cell right after code c = 64 (the rotation's
strong -> weak turn), in-process: each drafted step of the chat cell, with why it drafted (a
probe that was due, a surprise or second look, or the optimum itself drafting) and the
server-wide g(1..3) the plan read. The bench's cells: 384 code requests at c = 64, then 48 chat
requests at c = 1, 160 tokens at most.

    python bench/results/s44/scratch/after_strong.py [PREV_SET] [PREV_C] [SET] [C]

(``ENTER_MARGIN=x`` sets the hysteresis experiment's margin: needs sim_enter.py's patch.)
"""
import os
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, os.path.dirname(__file__))
from _trace import count_steps, rotation_engine, trace_plans  # noqa: E402


def main():
    a = sys.argv[1:] + [None] * 4
    prev, pc, cur, c = a[0] or "code", int(a[1] or 64), a[2] or "chat", int(a[3] or 1)
    from dflash_vllm.driver import drive
    if os.environ.get("ENTER_MARGIN"):  # (session 44's experiment, not kept: a margin to leave "no drafts")
        from dflash_vllm.adaptive import AdaptivePolicy
        AdaptivePolicy.ENTER_MARGIN = float(os.environ["ENTER_MARGIN"])
    engine, runner, reqs = rotation_engine()
    pol = runner.drafter.policy
    for s, cc in (("tasks", 1), ("code", 8), (prev, pc)):
        drive(engine, reqs(s, max(48, 6 * cc)), concurrency=cc, id_prefix=f"{s}{cc}-")
    log = []

    def on_plan(req_ids, k, q, why):
        if q:
            log.append((step[0], why, q, pol.acceptance.survival(["<new>"])[0, :3].round(2).tolist(),
                        pol.acceptance.shifts))
    trace_plans(pol, on_plan)
    step = count_steps(engine)
    res = drive(engine, reqs(cur, max(48, 6 * c)), concurrency=c, id_prefix=f"{cur}{c}-m-")
    n = len(res["steps"])
    toks = sum(x["new_tokens"] for x in res["steps"])
    print(f"{cur} c={c} after {prev} c={pc}: {n} steps, {toks / res['wall_s']:.0f} tok/s, {len(log)} drafted steps")
    counts = {}
    for _, w, *_ in log:
        counts[w] = counts.get(w, 0) + 1
    print("  why:", counts)
    print("  first 40:", " ".join(f"{i}:{w[:4]}q{q}g{g[0]}" for i, w, q, g, _ in log[:40]))
    print("  steps of the drafted ones by hundreds:", [sum(1 for i, *_ in log if h <= i < h + 100) for h in range(0, n, 100)])


if __name__ == "__main__":
    main()
