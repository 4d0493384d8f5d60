"""Session 41 (issue #10): an A/A control in the full check. With the same method in two or more
engine processes (none, none#2, ...) next to ours@adaptive and ours@k=0, per cell: each replica over
none (what the bench reads for two identical methods), adaptive and K = 0 over none, and the best
replica over none (the winner's curse of a best-of-N comparison); then the bench's own per-cell
verdict (90 % interval of the paired repeats, report.ratio_verdict) on >= 0.97x none for each.

    python bench/results/s41/scratch/aa.py FILE.json [...]
"""
import json
import math
import sys

from dflash_vllm.bench.report import ratio_verdict


def gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


for f in sys.argv[1:]:
    d = json.load(open(f))
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
    methods = sorted({c["method"] for c in d["cells"]})
    reps = [m for m in methods if m.startswith("none#")]
    others = [m for m in ("ours@adaptive", "ours@k=0") if m in methods]
    cells = sorted({(c["prompt_set"], c["concurrency"]) for c in d["cells"]},
                   key=lambda k: (["tasks", "code", "chat", "free"].index(k[0]), k[1]))
    tps = lambda k, m: by[(*k, m)]["output_tokens_per_s"]
    print(f"== {f} (requests per cell-run: {d['config'].get('requests_per_cell')})")
    print(f"{'cell':10} " + " ".join(f"{m + '/none':>12}" for m in reps + others) + f" {'best rep':>9} {'s/run none':>10}")
    rows = []
    for k in cells:
        r = {m: tps(k, m) / tps(k, "none") for m in reps + others}
        run_s = by[(*k, "none")]["wall_s"] / len(by[(*k, "none")]["tokens_per_s_per_repeat"])
        rows.append((k, r))
        print(f"{k[0]:5} {k[1]:4d} " + " ".join(f"{r[m]:12.3f}" for m in reps + others)
              + f" {max(r[m] for m in reps):9.3f} {run_s:10.2f}")
    for name, sets in (("strong", ("tasks", "code")), ("weak", ("chat", "free")), ("all", ("tasks", "code", "chat", "free"))):
        rs = [r for k, r in rows if k[0] in sets]
        if rs:
            print(f"{name:6}: geo-mean " + ", ".join(f"{m} {gm([r[m] for r in rs]):.3f}" for m in reps + others))
            # against all the no-speculation engines of the run pooled (none and its replicas)
            base = [gm([1.0] + [r[m] for m in reps]) for r in rs]
            print(f"{'':6}  over none and its replicas pooled: " + ", ".join(
                f"{m} {gm([r[m] / b for r, b in zip(rs, base)]):.3f}" for m in others))
    for m in reps + others:
        xs = [r[m] for _, r in rows]
        v = [ratio_verdict(by[(*k, m)]["tokens_per_s_per_repeat"], by[(*k, "none")]["tokens_per_s_per_repeat"], 0.97)["verdict"]
             for k, _ in rows]
        print(f"{m:14}: cells below 0.97x none {sum(x < 0.97 for x in xs)} of {len(xs)} (below 0.95: {sum(x < 0.95 for x in xs)}; "
              f"range {min(xs):.3f}-{max(xs):.3f}); bench verdict on >= 0.97: "
              + ", ".join(f"{x} {v.count(x)}" for x in ("meets", "undecided", "misses") if v.count(x)))
