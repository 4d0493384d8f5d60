"""Session 48: engines of one method started in order (none, none#2, ...): each one's tok/s over
the first's, geometric means over strong (tasks, code), weak (chat, free) and all cells, and per
repeat over all cells. A later-started engine reading above 1.0 is the start-order effect.

    python bench/results/s48/scratch/position.py bench/results/s48/aa-none4.json
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
methods = d["config"]["methods"]
sets = sorted({s for s, _, _ in by})
concs = sorted({c for _, c, _ in by})
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731


def ratio(m, cells, rep=None):
    if rep is None:
        return gm([by[(s, c, m)]["output_tokens_per_s"] / by[(s, c, methods[0])]["output_tokens_per_s"] for s, c in cells])
    return gm([by[(s, c, m)]["tokens_per_s_per_repeat"][rep] / by[(s, c, methods[0])]["tokens_per_s_per_repeat"][rep]
               for s, c in cells])


groups = (("strong", [s for s in sets if s in ("tasks", "code")]), ("weak", [s for s in sets if s in ("chat", "free")]),
          ("all", sets))
for name, ss in groups:
    cells = [(s, c) for s in ss for c in concs]
    if cells:
        print(f"{name:6} " + "  ".join(f"{m}/{methods[0]} {ratio(m, cells):.3f}" for m in methods[1:]))
cells = [(s, c) for s in sets for c in concs]
for r in range(d["config"]["repeats"]):
    print(f"repeat {r + 1} " + "  ".join(f"{m} {ratio(m, cells, r):.3f}" for m in methods[1:]))
