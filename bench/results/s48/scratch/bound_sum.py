"""Session 48: per concurrency (chat and free pooled, geometric means) each method's tok/s over
both nones' and its T_o over the nones' mean (ms a step); then all cells pooled.

    python bench/results/s48/scratch/bound_sum.py FILE.json
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
sets = sorted({s for s, _, _ in by})
concs = sorted({c for _, c, _ in by})
methods = [m for m in d["config"]["methods"] if not m.startswith("none")]
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
tok = lambda s, c, m: by[(s, c, m)]["output_tokens_per_s"]  # noqa: E731
to = lambda s, c, m: by[(s, c, m)]["step_ms"]["T_o"]  # noqa: E731
td = lambda s, c, m: by[(s, c, m)]["step_ms"]["T_d"]  # noqa: E731
base = lambda s, c: math.sqrt(tok(s, c, "none") * tok(s, c, "none#2"))  # noqa: E731
base_to = lambda s, c: (to(s, c, "none") + to(s, c, "none#2")) / 2  # noqa: E731
print("c     " + "  ".join(f"{m:>26}" for m in ["none#2"] + methods) + "   (tok/s over both nones | T_o - nones' | T_d)")
for c in concs + ["all"]:
    cells = [(s, x) for s in sets for x in (concs if c == "all" else [c])]
    row = [f"{gm([tok(s, x, 'none#2') / tok(s, x, 'none') for s, x in cells]):.3f} (over none)".rjust(26)]
    for m in methods:
        r = gm([tok(s, x, m) / base(s, x) for s, x in cells])
        dto = sum(to(s, x, m) - base_to(s, x) for s, x in cells) / len(cells)
        dtd = sum(td(s, x, m) for s, x in cells) / len(cells)
        row.append(f"{r:.3f} | {dto:+.3f} | {dtd:.3f}".rjust(26))
    print(f"{str(c):5} " + "  ".join(row))
