"""Trace (session 38, issue #10): the adaptive policy's plan step by step in the bench's worst
strong cell, tasks at c = 1 right after free prompts at c = 64 (repeats 2 and 3 of the full
check: mean K 11.4, 6.3 against 14.1 fresh). One in-process engine of the demo pair.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s38/scratch/trace_after.py [N_FREE] [N_TASKS]
"""
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    n_free = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    n_tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 48
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))

    def reqs(which, n, off=0):
        _, ids = prompt_set(which, tok, n + off)
        return [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
                for p in ids[off:]]

    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    pol = d.policy
    log = []
    orig_plan, orig_idle = pol.plan, pol.idle_step

    def plan(req_ids, is_decode, *a, **kw):
        k, q = orig_plan(req_ids, is_decode, *a, **kw)
        acc = pol.acceptance
        log.append({"t": time.perf_counter(), "step": pol.step, "n": len(req_ids), "ksum": int(k.sum()), "q": int(q),
                    "probes": pol._probes, "dormant": bool(pol.dormant), "acc_last": acc.last_accepted,
                    "g": [round(float(x), 3) for x in acc.rates()[:4]], "idle": False})
        return k, q

    def idle_step(*a, **kw):
        ok = orig_idle(*a, **kw)
        if ok:
            log.append({"t": time.perf_counter(), "step": pol.step, "n": a[0], "ksum": 0, "q": 0, "probes": pol._probes,
                        "dormant": True, "idle": True})
        return ok

    pol.plan, pol.idle_step = plan, idle_step
    drive(engine, reqs("tasks", 48), concurrency=1, id_prefix="warm-")
    drive(engine, reqs("free", n_free), concurrency=64, id_prefix="free-")
    mark = len(log)
    t = time.perf_counter()
    out = drive(engine, reqs("tasks", n_tasks, 48), concurrency=1, id_prefix="tasks-")
    wall = time.perf_counter() - t
    part = log[mark:]
    toks = sum(len(o["token_ids"]) for o in (out["outputs"].values() if isinstance(out["outputs"], dict) else out["outputs"]))
    print(f"tasks c=1 after free c=64: {len(part)} plans, wall {wall:.2f} s, tokens {toks}")
    line = "".join("." if e["q"] == 0 else ("P" if e.get("dormant") else ("#" if e["ksum"] >= 12 else str(min(9, e["ksum"]))))
                   for e in part)
    for i in range(0, len(line), 100):
        print(line[i:i + 100])
    for e in part[:400]:
        if e["q"] or not e["idle"]:
            print(json.dumps({k: e[k] for k in e if k != "t"}))
    print("TRACE " + json.dumps(part))


if __name__ == "__main__":
    main()
