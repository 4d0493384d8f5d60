"""Session 41: summary of stub_bench.py's run: per cell tok/s over none and none#2 pooled (geometric
mean of the two), and T_o / T_v per step, for K = 0 and K = 0 with the hook stubbed (ours@k=0#2).

    python bench/results/s41/scratch/stub_sum.py FILE.json
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
cells = sorted({(c["prompt_set"], c["concurrency"]) for c in d["cells"]}, key=lambda k: (k[0], k[1]))
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
rows = []
print(f"{'cell':9} {'#2/none':>8} {'k0/base':>8} {'stub/base':>9} | T_o ms none / none#2 / k0 / stub | T_v ms none / none#2 / k0 / stub")
for k in cells:
    t = {m: by[(*k, m)]["output_tokens_per_s"] for m in ("none", "none#2", "ours@k=0", "ours@k=0#2")}
    base = gm([t["none"], t["none#2"]])
    s = {m: by[(*k, m)]["step_ms"] for m in t}
    rows.append((k, t["none#2"] / t["none"], t["ours@k=0"] / base, t["ours@k=0#2"] / base,
                 s["ours@k=0"]["T_o"] - (s["none"]["T_o"] + s["none#2"]["T_o"]) / 2,
                 s["ours@k=0#2"]["T_o"] - (s["none"]["T_o"] + s["none#2"]["T_o"]) / 2))
    print(f"{k[0]:5}{k[1]:4d} {rows[-1][1]:8.3f} {rows[-1][2]:8.3f} {rows[-1][3]:9.3f} | "
          + " / ".join(f"{s[m]['T_o']:.2f}" for m in t) + " | " + " / ".join(f"{s[m]['T_v']:.2f}" for m in t))
print(f"pooled: none#2/none {gm([r[1] for r in rows]):.3f}; over none and none#2: K = 0 {gm([r[2] for r in rows]):.3f}, "
      f"K = 0 stubbed {gm([r[3] for r in rows]):.3f}")
print("T_o over the nones' mean, ms a step: K = 0 " + ", ".join(f"{r[0][0][0]}{r[0][1]}:{r[4]:+.2f}" for r in rows))
print("                            stubbed " + ", ".join(f"{r[0][0][0]}{r[0][1]}:{r[5]:+.2f}" for r in rows))
