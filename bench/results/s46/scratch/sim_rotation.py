"""Session 46 (issue #10): the adaptive policy in simulation through the full check's rotation of
batch sizes, with costs read off the bench (s45 full-aa-3, tasks: T_v and T_d per concurrency and
fixed K, interpolated in K), against the best fixed K per segment.

    [LOCAL=0] python bench/results/s46/scratch/sim_rotation.py [SEEDS] [REPEATS]

Per repeat: tasks at c = 1..64 (steps as the engine took them), then chat at c = 1..64. Prints
per tasks segment adaptive / best fixed K (pooled over seeds), repeat 1 and the later repeats
apart, and the chat segments against the best fixed K. With ``local-forgetting.patch`` applied:
LOCAL=0 turns its local forgetting off, HINGE sets the hinges' ridge, DKNOTS the drafting call's
knots ("" none); on the code without the patch they change nothing. PROBE_EVERY sets the policy's
probe floor (32).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tests", "unit"))
from test_adaptive import DEMO_HIST  # noqa: E402

from dflash_vllm.adaptive import AdaptivePolicy, CostModel  # noqa: E402

if os.environ.get("HINGE"):  # the hinges' ridge
    CostModel.HINGE_RIDGE = float(os.environ["HINGE"])
if os.environ.get("DKNOTS") is not None:  # the drafting call's hinges ("" none)
    CostModel.DRAFT_KNOTS = tuple(float(x) for x in os.environ["DKNOTS"].split(",") if x)

KS = np.array([0, 1, 3, 7, 15], dtype=float)
# ms, tasks, s45 full-aa-3: K = 0 column is none's step
TV = {1: [4.46, 5.05, 4.93, 5.58, 5.89], 2: [5.03, 5.52, 6.17, 6.98, 7.87], 4: [5.43, 5.99, 6.77, 8.76, 10.98],
      8: [6.34, 6.19, 8.67, 11.50, 16.63], 16: [8.09, 8.76, 11.40, 15.94, 20.66],
      32: [9.40, 13.65, 17.75, 19.92, 27.03], 64: [13.72, 20.56, 22.95, 34.15, 45.21]}
TD = {1: [2.98, 2.98, 2.88, 3.16, 3.82], 2: [3.29, 3.29, 3.49, 3.81, 4.72], 4: [3.50, 3.50, 3.79, 4.64, 6.25],
      8: [3.40, 3.40, 4.45, 5.88, 9.43], 16: [4.09, 4.09, 5.55, 7.99, 12.32],
      32: [6.40, 6.40, 7.32, 10.15, 15.67], 64: [8.42, 8.42, 10.20, 16.54, 24.23]}
for tab in (TV, TD):  # monotone in K (single readings are noisy)
    for r, v in tab.items():
        tab[r] = np.maximum.accumulate(np.array(v)) * 1e-3
TASK_STEPS = {1: 70, 2: 37, 4: 20, 8: 11, 16: 17, 32: 17, 64: 18}
CHAT_STEPS = {1: 300, 2: 160, 4: 90, 8: 48, 16: 48, 32: 48, 64: 48}
DELTA = 0.3e-3  # a drafted step's fixed extra over K = 1's line (in the table already)


def t_verify(n, r):
    k = (n - r) / r
    return float(np.interp(k, KS, TV[r])) + (DELTA if k > 0 else 0.0)


def t_draft(b, r):
    return float(np.interp(b / r - 1, KS, TD[r]))


def run(policy, segments, seed):
    """segments: [(hist name, r, steps, life)]; returns per segment (tokens, seconds)."""
    rng = np.random.default_rng(seed)
    out = []
    gen = 0
    t = 0.0  # one clock through the segments
    for hist, r, steps, life in segments:
        p = np.array(DEMO_HIST[hist], dtype=float)
        p /= p.sum()
        gen += 1
        ids = [f"q{i}.{gen}" for i in range(r)]
        k_prev = np.zeros(r, dtype=np.int64)
        t_seg = t
        emitted = 0
        drafted_before = False
        for step in range(steps):
            n = r + int(k_prev.sum())
            start = t
            t += t_verify(n, r)
            if n == r and drafted_before:
                t += 0.5 * TV[r][0]
            drafted_before = n > r
            a = np.minimum(rng.choice(len(p), size=r, p=p), k_prev)
            emitted += int(r + a.sum())
            policy.on_step(t, n, r, start)
            dr = k_prev > 0
            policy.acceptance.observe([ids[i] for i in np.flatnonzero(dr)], k_prev[dr], a[dr])
            if life and step % life == life - 1:
                policy.acceptance.forget(ids)
                gen += 1
                ids = [f"q{i}.{gen}" for i in range(r)]
            k, q = policy.plan(ids, np.ones(r, dtype=bool), num_decode=r)
            if q:
                b = int(np.count_nonzero(k)) * (q + 1)
                d = t_draft(b, r)
                policy.on_draft_time(d, b, r)
                t += d
            k_prev = k
        out.append((emitted, t - t_seg))
    return out


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    segs = []
    for _ in range(reps):
        segs += [("tasks", r, s, 10) for r, s in TASK_STEPS.items()]
        segs += [("chat", r, s, 60) for r, s in CHAT_STEPS.items()]
    def adaptive():
        p = AdaptivePolicy(15, probe_every=int(os.environ.get("PROBE_EVERY", 32)))
        if os.environ.get("LOCAL") == "0":  # one global forgetting, as before session 46
            p.cost.verify.region = p.cost.draft.region = p.cost.plain.region = None
        return p
    methods = {"adaptive": adaptive, **{f"k={k}": (lambda k=k: AdaptivePolicy(15, fixed=[k])) for k in (0, 1, 3, 7, 15)}}
    res = {m: np.zeros((len(segs), 2)) for m in methods}
    for seed in range(seeds):
        for m, mk in methods.items():
            pol = mk()
            res[m] += np.array(run(pol, segs, seed))
    gp = {m: v[:, 0] / v[:, 1] for m, v in res.items()}
    fixed = [m for m in methods if m != "adaptive"]
    n_seg = len(TASK_STEPS) + len(CHAT_STEPS)
    for rep in range(reps):
        row = []
        for i, (hist, r, _, _) in enumerate(segs[rep * n_seg:(rep + 1) * n_seg]):
            j = rep * n_seg + i
            best = max(gp[m][j] for m in fixed)
            row.append(f"{hist[0]}{r}:{gp['adaptive'][j] / best:.2f}")
        print(f"rep {rep + 1}: " + " ".join(row))
    later = slice(n_seg, None)
    tasks_later = [j for j in range(n_seg, len(segs)) if segs[j][0] == "tasks"]
    pooled = np.mean([gp["adaptive"][j] / max(gp[m][j] for m in fixed) for j in tasks_later])
    print(f"tasks, repeats 2+: mean adaptive / best fixed K {pooled:.3f}")


if __name__ == "__main__":
    main()
