"""Session 49: is the first-started engine slow? N engines of no speculation through the bench's
Worker, interleaved as `bench run` does; each one's tok/s over engine 0's, per cell and pooled.
Before them: LEAD = no (nothing), idle / idle2 (one or two throwaway engines, warmed, kept idle),
close (one, closed before the others start), ballastMB (a process writing and holding MB MiB).
REV_START=1 starts the engines in reverse (engine 0 last) with the same rotation indices.

    python bench/results/s49/scratch/pos_vllm.py LEAD N_ENGINES REPEATS 1,4,16,64 tasks,free
"""
import json, os, sys, time, statistics as st
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
from dflash_vllm.bench.runner import Worker, engine_kwargs
from dflash_vllm.prompts import prompt_set
from transformers import AutoTokenizer

def main():
    lead, n_eng, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    concs = [int(c) for c in sys.argv[4].split(",")]
    sets = sys.argv[5].split(",")
    target = os.path.join(sys.path[0], "dflash_vllm", "demo_pair", "target")
    tok = AutoTokenizer.from_pretrained(target)
    eos = [tok.eos_token_id]
    class A: max_model_len = 1024; kv_cache_mib = 512; engine = None
    kw = engine_kwargs(A, max(concs), n_eng)
    prompts = {s: prompt_set(s, tok, max(32, 2 * max(concs)))[1] for s in sets}
    os.makedirs("/tmp/s49-logs", exist_ok=True)
    ws = []
    if lead.startswith("ballast"):
        import subprocess
        mb = int(lead[7:] or 1500)
        B = subprocess.Popen([sys.executable, "-c", f"import sys; b = bytearray({mb} * 2**20); [b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; print('ok', flush=True); sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        B.stdout.readline()
    elif lead != "no":
        leads = []
        for j in range(2 if lead == "idle2" else 1):
            L = Worker("lead", {"model": target, "engine": kw, "sync_timers": True, "speculative_config": None}, f"/tmp/s49-logs/lead{j}.log")
            L.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 16, "stop_token_ids": eos} for i in prompts[sets[0]][:4]], "concurrency": 2})
            leads.append(L)
        if lead == "close":
            L.close()
    start = list(range(n_eng))[::-1] if os.environ.get("REV_START") else list(range(n_eng))
    byidx = {}
    for e in start:
        w = Worker(f"e{e}", {"model": target, "engine": kw, "sync_timers": True, "speculative_config": None}, f"/tmp/s49-logs/e{e}.log")
        w.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 16, "stop_token_ids": eos} for i in prompts[sets[0]][:4]], "concurrency": 2})
        byidx[e] = w
    ws = [byidx[e] for e in range(n_eng)]
    tps = {e: [] for e in range(n_eng)}
    cells = [(s, c) for s in sets for c in concs]
    order = list(range(n_eng))
    for r in range(reps):
        for ci, (s, c) in enumerate(cells):
            n = max(16, 2 * c)
            reqs = [{"prompt_token_ids": prompts[s][i], "max_tokens": 160, "stop_token_ids": eos} for i in range(n)]
            seq = order if r % 2 == 0 else order[::-1]
            sh = (ci + r) % n_eng
            row = {}
            for e in seq[sh:] + seq[:sh]:
                res = ws[e].call({"cmd": "run", "requests": reqs, "concurrency": c})
                row[e] = sum(x["new_tokens"] for x in res["steps"]) / res["wall_s"]
            for e in range(n_eng):
                tps[e].append(row[e] / row[0])
            print(r, s, c, " ".join(f"{row[e]/row[0]:.3f}" for e in range(n_eng)), flush=True)
    for w in ws:
        w.close()
    if lead.startswith("idle"):
        for L in leads: L.close()
    if lead.startswith("ballast"):
        B.stdin.close(); B.wait()
    import math
    print("lead", lead, "geomean over engine 0:", " ".join(f"e{e} {math.exp(st.mean(math.log(v) for v in tps[e])):.3f}" for e in range(n_eng)))

if __name__ == "__main__":
    main()
