import os
import json, os, sys, time, subprocess
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
from dflash_vllm.bench.runner import Worker, engine_kwargs
from dflash_vllm.prompts import prompt_set
from transformers import AutoTokenizer
os.makedirs("/tmp/s49-logs", exist_ok=True)
target = os.path.join(sys.path[0], "dflash_vllm", "demo_pair", "target")
tok = AutoTokenizer.from_pretrained(target); eos = [tok.eos_token_id]
class A: max_model_len = 1024; kv_cache_mib = 512; engine = None
kw = engine_kwargs(A, 16, 3)
ids = prompt_set("tasks", tok, 32)[1]
ws = []
for e in range(3):
    w = Worker(f"e{e}", {"model": target, "engine": kw, "sync_timers": True, "speculative_config": None}, f"/tmp/s49-logs/i{e}.log")
    w.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 16, "stop_token_ids": eos} for i in ids[:4]], "concurrency": 2})
    ws.append(w)
def info(pid):
    d = {}
    st = open(f"/proc/{pid}/status").read()
    for k in ("Threads", "VmRSS", "Cpus_allowed_list", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
        d[k] = [l.split(":", 1)[1].strip() for l in st.splitlines() if l.startswith(k)][0]
    sm = open(f"/proc/{pid}/smaps_rollup").read()
    d["AnonHuge"] = [l.split(":", 1)[1].strip() for l in sm.splitlines() if l.startswith("AnonHugePages")][0]
    d["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    d["socks"] = sum(1 for f in os.listdir(f"/proc/{pid}/fd") if os.readlink(f"/proc/{pid}/fd/{f}").startswith("socket"))
    tids = os.listdir(f"/proc/{pid}/task")
    d["thread_cpus"] = {}
    for t in tids:
        comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        sched = open(f"/proc/{pid}/task/{t}/sched").read()
        sw = [l for l in sched.splitlines() if l.startswith("nr_switches") or l.startswith("se.sum_exec_runtime")]
        aff = [l.split(":",1)[1].strip() for l in open(f"/proc/{pid}/task/{t}/status").read().splitlines() if l.startswith("Cpus_allowed_list")][0]
        d["thread_cpus"][t] = (comm, aff, " ".join(x.split()[-1] for x in sw))
    return d
for rnd in range(2):
    for e, w in enumerate(ws):
        a = info(w.proc.pid)
        t = time.perf_counter()
        res = w.call({"cmd": "run", "requests": [{"prompt_token_ids": i, "max_tokens": 160, "stop_token_ids": eos} for i in ids[:32]], "concurrency": 16})
        b = info(w.proc.pid)
        tps = sum(s["new_tokens"] for s in res["steps"]) / res["wall_s"]
        print(f"round {rnd} e{e} pid {w.proc.pid} tok/s {tps:.0f}")
        for k in a:
            if k != "thread_cpus":
                print("   ", k, a[k], "->", b[k])
        for tid in b["thread_cpus"]:
            print("     ", tid, b["thread_cpus"][tid], "before:", a["thread_cpus"].get(tid, ("", "", ""))[2])
for w in ws: w.close()
