"""Session 47: a variant_bench.py A/B pooled by weak (chat, free) and strong (tasks, code) cells, and
per cell the mean submitted K and drafted share of each side (geometric means of tok/s over none
and none#2).

    python bench/results/s47/scratch/ab_split.py FILE.json [NEW] [OLD]
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
new, old = (sys.argv[2:4] if len(sys.argv) > 3 else ("ours@adaptive", "ours@adaptive#2"))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
cells = sorted({(c["prompt_set"], c["concurrency"]) for c in d["cells"]})
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for name, sets in (("weak", ("chat", "free")), ("strong", ("tasks", "code"))):
    for lo, hi in ((1, 4), (8, 64), (1, 64)):
        ks = [k for k in cells if k[0] in sets and lo <= k[1] <= hi]
        r = {}
        for m in (new, old, "none#2"):
            r[m] = gm([by[(*k, m)]["output_tokens_per_s"] / gm([by[(*k, "none")]["output_tokens_per_s"],
                                                                  by[(*k, "none#2")]["output_tokens_per_s"]]) for k in ks])
        print(f"{name:6} c={lo}-{hi}: new {r[new]:.3f} old {r[old]:.3f} new/old {r[new] / r[old]:.3f} (none#2 {r['none#2']:.3f}, {len(ks)} cells)")
