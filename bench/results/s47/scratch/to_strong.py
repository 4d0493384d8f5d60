"""Session 47: adaptive's T_o (host time of a step outside the two forwards, ms) over the mean of
the pinned K = 3, 7, 15 engines' in the strong cells (tasks, code) at c = 1..16, per full-check file.

    python bench/results/s47/scratch/to_strong.py FILE.json [FILE.json ...]
"""
import json
import sys

for f in sys.argv[1:]:
    d = json.load(open(f))
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c["step_ms"]["T_o"] for c in d["cells"]}
    diffs = []
    row = []
    for s in ("tasks", "code"):
        for c in (1, 2, 4, 8, 16):
            pinned = sum(by[(s, c, f"ours@k={k}")] for k in (3, 7, 15)) / 3
            diffs.append(by[(s, c, "ours@adaptive")] - pinned)
            row.append(f"{s[0]}{c}:{diffs[-1]:+.2f}")
    print(f"{f}: mean {sum(diffs) / len(diffs):+.3f} ms | " + " ".join(row))
