"""Scratch (session 28): per cell and method, steps, tok/s (per repeat) and the T_v / T_d / T_o split. Usage: python split.py RESULT.json ..."""
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    print(f)
    for c in sorted(d["cells"], key=lambda c: (c["prompt_set"], c["concurrency"], c["method"])):
        s = c["step_ms"]
        print(f'  {c["prompt_set"]:5s} {c["concurrency"]:3d} {c["method"]:14s} steps {c["num_steps"]:5d} tok/s {c["output_tokens_per_s"]:8.1f} per-rep {[round(x) for x in c["tokens_per_s_per_repeat"]]} Tv {s["T_v"]:6.2f} Td {s["T_d"]:5.2f} To {s["T_o"]:5.2f}')
