"""Session 44: the full check's pooled figures of the note (geometric means over cells): adaptive
and K = 0 over none and over both nones, strong (tasks, code) and weak (chat, free); T_o over the
nones' mean in the weak cells at c <= 16; mean submitted K per set and concurrency.

    python bench/results/s44/scratch/pool.py FILE.json
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
by = {(c["prompt_set"], c["concurrency"], c["method"]): c for c in d["cells"]}
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
tok = lambda s, c, m: by[(s, c, m)]["output_tokens_per_s"]  # noqa: E731
concs = sorted({c for _, c, _ in by})
for name, sets in (("strong", ("tasks", "code")), ("weak", ("chat", "free"))):
    cells = [(s, c) for s in sets for c in concs]
    row = []
    for m in ("ours@adaptive", "ours@k=0"):
        row.append(f"{m} / none {gm([tok(s, c, m) / tok(s, c, 'none') for s, c in cells]):.3f}, / both nones "
                   f"{gm([tok(s, c, m) / math.sqrt(tok(s, c, 'none') * tok(s, c, 'none#2')) for s, c in cells]):.3f}")
    print(f"{name}: " + "; ".join(row))
weak = [(s, c) for s in ("chat", "free") for c in concs if c <= 16]
for m in ("ours@adaptive", "ours@k=0"):
    dto = [by[(s, c, m)]["step_ms"]["T_o"] - (by[(s, c, "none")]["step_ms"]["T_o"] + by[(s, c, "none#2")]["step_ms"]["T_o"]) / 2
           for s, c in weak]
    print(f"T_o over the nones' mean, weak cells c <= 16: {m} {sum(dto) / len(dto):+.3f} ms")
for s in ("tasks", "code", "chat", "free"):
    print(f"mean K {s}: " + ", ".join(f"{by[(s, c, 'ours@adaptive')]['mean_submitted_k']:.2f}" for c in concs))
