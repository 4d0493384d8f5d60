"""Scratch (session 27): pooled summary of a full-check JSON (geometric means of adaptive_check over strong = tasks, code and weak = chat, free cells; fixed-K / none). Usage: python pooled.py FILE.json"""
import json, sys, math
def gm(xs): return math.exp(sum(math.log(x) for x in xs) / len(xs))
for f in sys.argv[1:]:
    d = json.load(open(f))
    ac = d["adaptive_check"]
    by = {(c["prompt_set"], c["concurrency"], c["method"]): c["output_tokens_per_s"] for c in d["cells"]}
    ok = sum(1 for r in ac if r["ok"])
    print(f"{f}: {ok} of {len(ac)} cells meet both goals")
    for name, sets in (("strong", ("tasks", "code")), ("weak", ("chat", "free"))):
        rows = [r for r in ac if r["prompt_set"] in sets]
        line = f"  {name}: adaptive/none {gm([r['vs_none'] for r in rows]):.3f}, /best fixed {gm([r['vs_best_fixed'] for r in rows]):.3f}, held out {gm([r['vs_best_fixed_held_out'] for r in rows if r.get('vs_best_fixed_held_out')]):.3f}"
        for k in (0, 1, 3, 7, 15):
            line += f", K={k} {gm([by[r['prompt_set'], r['concurrency'], f'ours@k={k}'] / by[r['prompt_set'], r['concurrency'], 'none'] for r in rows]):.3f}"
        print(line)
    print(f"  all: /best fixed {gm([r['vs_best_fixed'] for r in ac]):.3f}, held out {gm([r['vs_best_fixed_held_out'] for r in ac if r.get('vs_best_fixed_held_out')]):.3f}")
    vn = [r for r in ac if r["vs_none"] < 0.97]; vb = [r for r in ac if r["vs_best_fixed"] < 0.95]
    print("  below 0.97 none:", [(r["prompt_set"], r["concurrency"], r["vs_none"]) for r in vn])
    print("  below 0.95 best:", [(r["prompt_set"], r["concurrency"], r["vs_best_fixed"]) for r in vb])
    verd = lambda key: {v: [(r["prompt_set"], r["concurrency"]) for r in ac if r[key]["verdict"] == v] for v in ("meets", "misses")}
    vn_, vb_ = verd("vs_none_repeats"), verd("vs_best_fixed_repeats")
    print(f"  paired vs none: {len(vn_['meets'])} meet, misses {vn_['misses']}; vs best: {len(vb_['meets'])} meet, misses {vb_['misses']}")
    print("  mean K:", " ".join(f"{r['prompt_set'][:2]}{r['concurrency']}:{r['mean_submitted_k']:.1f}" for r in ac))
