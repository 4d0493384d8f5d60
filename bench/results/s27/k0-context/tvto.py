import json, sys, math
print("run      | T_v k0/none per c (chat+free mean)            | T_o k0-none ms per c")
for tag in sys.argv[1:]:
    d = json.load(open(f"/tmp/s27/k0-{tag}.json"))
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c["step_ms"] for c in d["cells"]}
    tv, to = [], []
    for c in (1, 2, 4, 8, 16, 32, 64):
        tv.append(sum(by[p, c, "ours@k=0"]["T_v"] / by[p, c, "none"]["T_v"] for p in ("chat", "free")) / 2)
        to.append(sum(by[p, c, "ours@k=0"]["T_o"] - by[p, c, "none"]["T_o"] for p in ("chat", "free")) / 2)
    print(f"{tag:8s} | " + " ".join(f"{x:.3f}" for x in tv) + " | " + " ".join(f"{x:.2f}" for x in to))
