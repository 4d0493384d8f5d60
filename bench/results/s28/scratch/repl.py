"""Scratch (session 28): per cell, each method's tok/s over none's (pooled and per repeat), and pooled geometric means. Usage: python repl.py RESULT.json."""
import json, sys, math
d = json.load(open(sys.argv[1]))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
methods = d["config"]["methods"]
for ps in d["config"]["prompt_sets"]:
    for conc in d["config"]["concurrency"]:
        base = by[(ps, conc, "none")]["tokens_per_s_per_repeat"]
        row = []
        for m in methods:
            per = by[(ps, conc, m)]["tokens_per_s_per_repeat"]
            row.append(f"{m}: {by[(ps,conc,m)]['output_tokens_per_s']/by[(ps,conc,'none')]['output_tokens_per_s']:.3f} [{' '.join(f'{a/b:.2f}' for a,b in zip(per,base))}]")
        print(ps, conc, " | ".join(row))
for m in methods:
    xs = [by[(ps, c, m)]["output_tokens_per_s"] / by[(ps, c, "none")]["output_tokens_per_s"] for ps in d["config"]["prompt_sets"] for c in d["config"]["concurrency"]]
    print(m, "pooled / none", round(math.exp(sum(map(math.log, xs)) / len(xs)), 4))
