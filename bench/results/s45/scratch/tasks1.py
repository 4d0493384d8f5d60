"""Session 45 scratch (issue #10): the full check's tasks c = 1 cell, adaptive against K = 15 pinned,
in one in-process engine (the pin set on the live policy, ``policy.fixed``, for the K = 15 cells), each
cell right after free c = 64 as in the bench's repeats 2-3. Per cell: tok/s, engine steps, steps that
drafted and their block sizes, plain steps before the first drafted one, and the time spent in the
drafting call (runner.propose_draft_token_ids) on plain and on drafted steps.

    python bench/results/s45/scratch/tasks1.py [ROUNDS] [SET] [C] [PREV_SET] [PREV_C]
"""
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "s44", "scratch"))
from _trace import count_steps, rotation_engine, trace_plans  # noqa: E402


def main():
    a = sys.argv[1:] + [None] * 5
    rounds, cur, c, prev, pc = int(a[0] or 3), a[1] or "tasks", int(a[2] or 1), a[3] or "free", int(a[4] or 64)
    from dflash_vllm.driver import drive
    engine, runner, reqs = rotation_engine()
    d = runner.drafter
    pol = d.policy
    for s, cc in (("tasks", 1), ("code", 8), (prev, pc)):
        drive(engine, reqs(s, max(16, 2 * cc)), concurrency=cc, id_prefix=f"w{s}{cc}-")
    log = []
    trace_plans(pol, lambda req_ids, k, q, why: log.append((step[0], q, int(k.sum()), why, len(req_ids), round(pol._level or 0, 2),
                                                            pol.acceptance.survival(["<new>"])[0, 0].round(2))))
    step = count_steps(engine)
    call = []
    orig = runner.propose_draft_token_ids

    def timed(*args):
        t = time.perf_counter()
        try:
            return orig(*args)
        finally:
            call.append((step[0], time.perf_counter() - t))
    runner.propose_draft_token_ids = timed
    parts = {}

    def part(obj, name, label):
        f = getattr(obj, name)

        def w(*a, **kw):
            t = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                e = parts.setdefault(label, [0.0, 0])
                e[0] += time.perf_counter() - t
                e[1] += 1
        setattr(obj, name, w)
    for obj, name, label in ((d, "_plan", "_plan"), (pol, "_optimum", "optimum"), (pol, "on_step", "on_step"),
                             (d, "_flush_queue", "flush"), (d, "_observe_draft_time", "obs_draft"),
                             (pol, "_choose", "choose"), (d.model, "forward", "drafter fwd"),
                             (d, "_sample_draft_tokens", "sample_drafts"), (runner, "take_draft_token_ids", "take"),
                             (pol.acceptance, "survival", "survival")):
        part(obj, name, label)
    out = {"adaptive": [], "k15": []}
    for r in range(rounds):
        for mode in (("adaptive", "k15") if r % 2 == 0 else ("k15", "adaptive")):
            pol.fixed = None
            drive(engine, reqs(prev, max(16, 2 * pc)), concurrency=pc, id_prefix=f"p{r}{mode}-")
            if mode == "k15":
                pol.fixed, pol.idle_left = [15], 0
            log.clear()
            call.clear()
            parts.clear()
            step[0] = 0
            res = drive(engine, reqs(cur, max(16, 2 * c)), concurrency=c, id_prefix=f"m{r}{mode}-")
            pol.fixed = None
            n = len(res["steps"])
            toks = sum(x["new_tokens"] for x in res["steps"])
            drafted = [x for x in log if x[1]]
            first = drafted[0][0] if drafted else n
            dsteps = {i for i, q, *_ in drafted}
            t_d = sum(t for i, t in call if i in dsteps)
            t_p = sum(t for i, t in call if i not in dsteps)
            wall_d = sum(s["seconds"] for i, s in enumerate(res["steps"]) if i in dsteps)
            wall_p = sum(s["seconds"] for i, s in enumerate(res["steps"]) if i not in dsteps)
            tok_d = sum(s["new_tokens"] for i, s in enumerate(res["steps"]) if i in dsteps)
            qs = {}
            for _, q, *_r in drafted:
                qs[q] = qs.get(q, 0) + 1
            whys = {}
            for x in drafted:
                whys[x[3]] = whys.get(x[3], 0) + 1
            row = dict(tps=toks / res["wall_s"], steps=n, drafted=len(drafted), first=first, toks=toks, tok_d=tok_d,
                       wall_d=wall_d, wall_p=wall_p, call_d=t_d, call_p=t_p, qs=dict(sorted(qs.items())), why=whys,
                       plain_after=sorted(i for i in range(first, n) if i not in dsteps)[:40])
            out[mode].append(row)
            print(f"[{r}] {mode:8s} {cur} c={c}: {row['tps']:.0f} tok/s, {n} steps, {len(drafted)} drafted (first at {first}), "
                  f"tokens {toks} ({tok_d} on drafted), wall drafted {wall_d:.2f} s plain {wall_p:.2f} s "
                  f"({n - len(drafted)} steps), call drafted {t_d * 1e3 / max(len(drafted), 1):.2f} ms plain "
                  f"{t_p * 1e3 / max(n - len(drafted), 1):.3f} ms; q {row['qs']}; why {whys}", flush=True)
            print("     parts (ms per cell, calls):", {k: (round(v[0] * 1e3, 1), v[1]) for k, v in parts.items()}, flush=True)
            if os.environ.get("FIRST"):
                print("     first plans (step, q, sum k, why, batch, level, s(1)):", log[:int(os.environ["FIRST"])], flush=True)
            print(f"     plain steps after the first drafted: {row['plain_after']}", flush=True)
    for m, rows in out.items():
        print(m, "mean tok/s", sum(r["tps"] for r in rows) / len(rows))


if __name__ == "__main__":
    main()
