import os
import sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
from dflash_vllm.bench.runner import Worker, engine_kwargs
from dflash_vllm.prompts import prompt_set
from transformers import AutoTokenizer
os.makedirs("/tmp/s49-logs", exist_ok=True)
target = os.path.join(sys.path[0], "dflash_vllm", "demo_pair", "target")
tok = AutoTokenizer.from_pretrained(target); eos = [tok.eos_token_id]
class A: max_model_len = 1024; kv_cache_mib = 512; engine = None
kw = engine_kwargs(A, 16, 4)
ids = prompt_set("tasks", tok, 32)[1]
ws = []
def roll(pid):
    out = {}
    for l in open(f"/proc/{pid}/smaps_rollup"):
        k, _, v = l.partition(":")
        if k in ("Rss", "Shared_Clean", "Private_Clean", "Private_Dirty", "AnonHugePages", "FilePmdMapped", "Anonymous"):
            out[k] = int(v.split()[0]) // 1024
    return out
for e in range(4):
    w = Worker(f"e{e}", {"model": target, "engine": kw, "sync_timers": True, "speculative_config": None}, f"/tmp/s49-logs/p{e}.log")
    w.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 16, "stop_token_ids": eos} for i in ids[:4]], "concurrency": 2})
    ws.append(w)
    print("started", e, {f"e{j}": roll(x.proc.pid) for j, x in enumerate(ws)}, flush=True)
for e, w in enumerate(ws):
    w.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 160, "stop_token_ids": eos} for i in ids[:32]], "concurrency": 16})
print("after runs", {f"e{j}": roll(x.proc.pid) for j, x in enumerate(ws)})
# which mappings are PMD-mapped in e0 vs e3
for e in (0, 3):
    cur, res = None, []
    for l in open(f"/proc/{ws[e].proc.pid}/smaps"):
        parts = l.split()
        if len(parts) >= 5 and "-" in parts[0] and ":" not in parts[0]:
            cur = parts[-1] if len(parts) >= 6 else "[anon]"
        elif l.startswith("FilePmdMapped") and int(parts[1]) > 0:
            res.append((cur.split("/")[-1], int(parts[1]) // 1024))
    print("e", e, "PMD-mapped files (MiB):", res)
for w in ws: w.close()
