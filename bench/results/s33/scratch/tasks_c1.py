"""Scratch (session 33): tasks c = 1, adaptive / K = 15 per repeat, and the weak cells' K = 0 / none,
from a full check's JSON. Usage: python tasks_c1.py FILE..."""
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    rep = {c["method"]: c["tokens_per_s_per_repeat"] for c in d["cells"] if c["prompt_set"] == "tasks" and c["concurrency"] == 1}
    a, k = rep["ours@adaptive"], rep["ours@k=15"]
    print(f, "tasks c=1 adaptive/K=15 per repeat:", [round(x / y, 2) for x, y in zip(a, k)])
