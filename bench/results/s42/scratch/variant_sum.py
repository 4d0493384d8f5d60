"""Session 42: summary of a variant_bench.py run: per cell, each method's tok/s over none and none#2
pooled (geometric mean), and its T_o (ms a step) over the nones' mean; pooled over the cells.

    python bench/results/s42/scratch/variant_sum.py FILE.json METHOD=NAME ...
      e.g. ours@k=0=shipped ours@k=0#2=stub ours@k=0#3=noplan ours@k=0#4=noqueue   (bisect)
           ours@adaptive=new ours@adaptive#2=old                                    (ab)
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
M = dict(a.rsplit("=", 1) for a in sys.argv[2:])
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
cells = sorted({(c["prompt_set"], c["concurrency"]) for c in d["cells"]})
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
ratio, dto, aa = {n: [] for n in M.values()}, {n: [] for n in M.values()}, []
print(f"{'cell':9} {'#2/none':>8} " + " ".join(f"{n:>8}" for n in M.values()) + " | T_o over the nones' mean, ms: "
      + " / ".join(M.values()))
for k in cells:
    t = {m: by[(*k, m)]["output_tokens_per_s"] for m in ("none", "none#2", *M)}
    s = {m: by[(*k, m)]["step_ms"]["T_o"] for m in t}
    base, to = gm([t["none"], t["none#2"]]), (s["none"] + s["none#2"]) / 2
    aa.append(t["none#2"] / t["none"])
    for m, n in M.items():
        ratio[n].append(t[m] / base)
        dto[n].append(s[m] - to)
    print(f"{k[0]:5}{k[1]:4d} {aa[-1]:8.3f} " + " ".join(f"{ratio[n][-1]:8.3f}" for n in M.values()) + " | "
          + " / ".join(f"{dto[n][-1]:+.2f}" for n in M.values()))
print(f"pooled over {len(cells)} cells: none#2/none {gm(aa):.3f}; over none and none#2: "
      + ", ".join(f"{n} {gm(ratio[n]):.3f}" for n in M.values()))
for lo, hi in ((1, 16), (32, 64)):
    ix = [i for i, k in enumerate(cells) if lo <= k[1] <= hi]
    if ix:
        print(f"mean T_o over the nones' at c = {lo}-{hi} ({len(ix)} cells), ms a step: "
              + ", ".join(f"{n} {sum(dto[n][i] for i in ix) / len(ix):+.3f}" for n in M.values()))
