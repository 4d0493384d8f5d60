"""Paired per-repeat ratios of a weak-cells bench run (session 37, issue #10): per cell, adaptive / none
and K = 0 / none with 90 % intervals (log-ratios of the paired repeats), adaptive / K = 0, mean submitted K,
and each method step time; then the pools over every repeat pair.

    python bench/results/s37/scratch/weakstat.py FILE.json
"""
import json, sys, math, statistics as st
d = json.load(open(sys.argv[1]))
by = {}
for c in d["cells"]:
    by[(c["prompt_set"], c["concurrency"], c["method"])] = c
def ratio(a, b):
    ra, rb = a["tokens_per_s_per_repeat"], b["tokens_per_s_per_repeat"]
    logs = [math.log(x / y) for x, y in zip(ra, rb)]
    m = st.mean(logs); se = st.stdev(logs) / math.sqrt(len(logs))
    return logs, m, se
allA, allK = [], []
print("set c | adaptive/none [90%] | k0/none [90%] | adaptive/k0 | meanK | steps(none) | step_ms none/adapt/k0")
for (ps, c, m), cell in sorted(by.items()):
    if m != "none": continue
    a, k = by[(ps, c, "ours@adaptive")], by[(ps, c, "ours@k=0")]
    la, ma, sa = ratio(a, cell); lk, mk, sk = ratio(k, cell); _, mak, _ = ratio(a, k)
    allA += la; allK += lk
    mk_ = next(x["mean_submitted_k"] for x in d["adaptive_check"] if x["prompt_set"] == ps and x["concurrency"] == c)
    f = lambda m, s: f"{math.exp(m):.3f} [{math.exp(m-1.83*s):.3f},{math.exp(m+1.83*s):.3f}]"
    sm = lambda x: x.get("step_ms") if not isinstance(x.get("step_ms"), dict) else x["step_ms"].get("total")
    print(ps, c, "|", f(ma, sa), "|", f(mk, sk), "|", f"{math.exp(mak):.3f}", "|", mk_, "|", cell["num_steps"], "|", sm(cell), sm(a), sm(k))
for name, L in (("adaptive", allA), ("k0", allK)):
    m = st.mean(L); se = st.stdev(L) / math.sqrt(len(L))
    print(name, "/none pooled over all repeats:", round(math.exp(m), 4), [round(math.exp(m - 1.96 * se), 4), round(math.exp(m + 1.96 * se), 4)], "n", len(L), "sd per repeat", round(st.stdev(L), 3))
