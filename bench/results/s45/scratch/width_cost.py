"""Session 45 scratch (issue #10): does a drafted step at batch B cost more with K = A drafts than
with K = 15 when both pad to the same oneDNN width (fixes/cpu_gemm_widths.py)? One in-process
engine, the pin cycled per step (``DFLASH_VLLM_FIXED_K`` = "A,A,15,15"), tasks prompts at
concurrency B; per step the runner's verify (execute_model) and drafting call
(propose_draft_token_ids) times, grouped by (drafts verified, drafts planned), medians.

    python bench/results/s45/scratch/width_cost.py [A] [B] [REQUESTS]
"""
import os
import statistics
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    a = sys.argv[1:] + [None] * 3
    ka, conc, n = int(a[0] or 11), int(a[1] or 1), int(a[2] or 48)
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive, install_step_timers
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, f"{ka},{ka},15,15")
    timers = install_step_timers()
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    ids = prompt_set("tasks", tok, n)[1]
    reqs = [{"prompt_token_ids": ids[i % len(ids)], "max_tokens": 160, "ignore_eos": True} for i in range(n)]
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    pol = runner.drafter.policy
    qs = []
    orig = pol.plan

    def plan(*x, **kw):
        k, q = orig(*x, **kw)
        qs.append(q)
        return k, q
    pol.plan = plan
    drive(engine, reqs[: max(8, conc)], concurrency=conc, timers=timers)  # warm
    for rnd in range(2):
        qs.clear()
        res = drive(engine, reqs, concurrency=conc, timers=timers, id_prefix=f"r{rnd}-")
        groups = {}
        steps = res["steps"]
        for i in range(1, min(len(steps), len(qs))):
            s = steps[i]
            if s["running"] != conc:
                continue
            groups.setdefault((qs[i - 1], qs[i]), []).append((s.get("verify_s", 0), s.get("draft_s", 0), s["seconds"]))
        for key in sorted(groups):
            g = groups[key]
            if len(g) < 5:
                continue
            med = [statistics.median(x[j] for x in g) * 1e3 for j in range(3)]
            print(f"round {rnd} verified {key[0]:2d} planned {key[1]:2d}: {len(g):4d} steps, verify {med[0]:.2f} ms, "
                  f"draft {med[1]:.2f} ms, step {med[2]:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
