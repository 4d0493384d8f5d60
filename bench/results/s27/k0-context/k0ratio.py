import json, sys, math
for f in sys.argv[1:]:
    d = json.load(open(f))
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
    out = []
    logs = []
    for ps in ("chat", "free"):
        row = []
        for c in (1, 2, 4, 8, 16, 32, 64):
            r = by[ps, c, "ours@k=0"]["output_tokens_per_s"] / by[ps, c, "none"]["output_tokens_per_s"]
            row.append(f"{r:.2f}"); logs.append(math.log(r))
        out.append(f"{ps}: " + " ".join(row))
    print(f.split("/")[-1], "| ".join(out), f"| pooled {math.exp(sum(logs)/len(logs)):.3f}")
