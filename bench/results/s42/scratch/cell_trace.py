"""Session 42 (issue #10): the adaptive policy's view at the end of each cell of the full check's
rotation, for repeats of tasks, code, chat, free at c = 1..64 on one in-process engine (the bench's
requests: max(16, 2c) per cell, 160 tokens at most). Per cell: tok/s, mean submitted K (over
decoding requests, every step), and at the cell's end the server-wide survival curve the policy
reads for a request it has never seen, the modelled T_v of a plain step and of K = 3, 7, 15 drafts
per request, and the modelled drafting call for K = 3 and 15 (K = 1, 3, 7, 15 from session 46); and the steps that drafted (drafter
forwards: the rest were plain, prefill-only or idle-window steps).

    python bench/results/s42/scratch/cell_trace.py [REPEATS] [SETS] [CONCURRENCIES]
"""
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sets = (sys.argv[2] if len(sys.argv) > 2 else "tasks,code,chat,free").split(",")
    concs = [int(c) for c in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4,8,16,32,64").split(",")]
    import numpy as np
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(concs))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]
    prompts = {s: prompt_set(s, tok, max(16, 2 * max(concs)))[1] for s in sets}
    engine = llm.llm_engine
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 16, "stop_token_ids": eos, "ignore_eos": False}
                   for p in prompts[sets[0]][:4]], concurrency=2, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    pol = d.policy
    plans = []  # q of every full plan (the idle window's steps are plain too: counted apart)
    orig_plan = pol.plan

    def plan(*a, **k):
        kk, q = orig_plan(*a, **k)
        plans.append(q)
        return kk, q
    pol.plan = plan
    for rep in range(reps):
        for s in sets:
            for c in concs:
                n = max(16, 2 * c)
                reqs = [{"prompt_token_ids": prompts[s][i], "max_tokens": 160, "stop_token_ids": eos,
                         "ignore_eos": False} for i in range(n)]
                h0 = d.submitted_hist.copy()
                p0, f0 = len(plans), d.num_drafter_forwards
                t = time.perf_counter()
                res = drive(engine, reqs, concurrency=c, id_prefix=f"{s}{c}r{rep}-")
                wall = time.perf_counter() - t
                h = d.submitted_hist - h0
                mk = float((h * np.arange(len(h))).sum() / max(h.sum(), 1))
                toks = sum(x["new_tokens"] for x in res["steps"])
                cm = pol.cost
                surv = pol.acceptance.survival(["<never-seen>"])[0, :10].round(2).tolist()
                R = c
                tv = [1e3 * float(cm.t_verify(R, R * k)) for k in (0, 3, 7, 15)] if cm.ready else []
                td = [1e3 * float(cm.t_draft(R * (k + 1), R)) for k in (1, 3, 7, 15)] if cm.ready else []
                drafted = d.num_drafter_forwards - f0
                print(f"[{rep + 1}] {s:5} c={c:<3} {toks / wall:7.0f} tok/s steps {len(res['steps']):4d} meanK {mk:5.2f} "
                      f"drafted steps {drafted:3d} | "
                      f"surv {surv} | T_v K0/3/7/15 {' '.join(f'{x:.1f}' for x in tv)} | T_d K1/3/7/15 "
                      f"{' '.join(f'{x:.1f}' for x in td)}", flush=True)


if __name__ == "__main__":
    main()
