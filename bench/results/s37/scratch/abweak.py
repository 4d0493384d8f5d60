"""Session 37 (issue #10): weak-cells runs of two code versions, alternated (new, old, new, old),
pooled: adaptive / none, K = 0 / none and adaptive / K = 0 over every paired repeat (geometric
mean with a 95 % interval), and adaptive / K = 0 per cell for each version.

    python bench/results/s37/scratch/abweak.py NEW1.json OLD1.json NEW2.json OLD2.json
"""
import json
import math
import statistics as st
import sys


def pairs(d, a, b):
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
    out = {}
    for (ps, c, m), cell in by.items():
        if m != a:
            continue
        x, y = cell["tokens_per_s_per_repeat"], by[(ps, c, b)]["tokens_per_s_per_repeat"]
        out[(ps, c)] = [math.log(u / v) for u, v in zip(x, y)]
    return out


def pool(logs):
    m, se = st.mean(logs), st.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(m):.3f} [{math.exp(m - 1.96 * se):.3f}, {math.exp(m + 1.96 * se):.3f}]"


files = sys.argv[1:]
groups = {"new": [f for i, f in enumerate(files) if i % 2 == 0], "old": [f for i, f in enumerate(files) if i % 2 == 1]}
cells = {}
for name, fs in groups.items():
    ds = [json.load(open(f)) for f in fs]
    for a, b in (("ours@adaptive", "none"), ("ours@k=0", "none"), ("ours@adaptive", "ours@k=0")):
        per = {}
        for d in ds:
            for k, v in pairs(d, a, b).items():
                per.setdefault(k, []).extend(v)
        logs = [x for v in per.values() for x in v]
        print(f"{name}: {a} / {b} pooled over {len(logs)} pairs: {pool(logs)}")
        if b == "ours@k=0":
            cells[name] = {k: math.exp(st.mean(v)) for k, v in per.items()}
print("adaptive / K=0 per cell (new, old):")
for k in sorted(cells["new"]):
    print(f"  {k[0]} c={k[1]}: {cells['new'][k]:.3f}  {cells['old'][k]:.3f}")
