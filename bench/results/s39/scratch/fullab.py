"""Scratch (session 39, issue #10): full checks side by side (alternated runs of two code
versions): pooled over the strong (tasks, code) and weak (chat, free) cells, adaptive / none,
/ best fixed K, / K = 0; and the cells the session's change aims at (c = 1 after a fall of the
load; c = 64). Geometric means over cells.

    python bench/results/s39/scratch/fullab.py A.json B.json ...
"""
import json
import math
import sys


def gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


for f in sys.argv[1:]:
    d = json.load(open(f))
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c["output_tokens_per_s"] for c in d["cells"]}
    ac = {(r["prompt_set"], r["concurrency"]): r for r in d["adaptive_check"]}

    def ratio(ps, c, m):
        return by[ps, c, "ours@adaptive"] / by[ps, c, m]

    out = [f"{f.split('/')[-1]:28}"]
    for name, sets in (("strong", ("tasks", "code")), ("weak", ("chat", "free"))):
        keys = [k for k in ac if k[0] in sets]
        out.append(f"{name}: /none {gm([ratio(*k, 'none') for k in keys]):.3f} /best {gm([ac[k]['vs_best_fixed'] for k in keys]):.3f}"
                   f" /K0 {gm([ratio(*k, 'ours@k=0') for k in keys]):.3f} K0/none {gm([by[(*k, 'ours@k=0')] / by[(*k, 'none')] for k in keys]):.3f}")
    c1s = [("tasks", 1), ("code", 1)]
    c1w = [("chat", 1), ("free", 1)]
    out.append(f"c=1 strong /best {gm([ac[k]['vs_best_fixed'] for k in c1s]):.3f} c=1 weak /none {gm([ratio(*k, 'none') for k in c1w]):.3f}"
               f" /K0 {gm([ratio(*k, 'ours@k=0') for k in c1w]):.3f}")
    c64 = [(s, 64) for s in ("tasks", "code", "chat", "free")]
    out.append(f"c=64 /best {gm([ac[k]['vs_best_fixed'] for k in c64]):.3f} /none {gm([ratio(*k, 'none') for k in c64]):.3f}")
    out.append(f"cells ok {sum(r['ok'] for r in ac.values())}/28")
    print(" | ".join(out))
