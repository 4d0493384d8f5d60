"""Session 40 (issue #12): the drafter's context write (write_context_kv, compute only: no cache write) in a
warm loop on the demo pair's drafter, per row count, with torch.profiler's op table at 1 and 16 rows.

    python bench/results/s40/scratch/ctxw.py
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    import torch
    from dflash_vllm import envs
    from dflash_vllm.bench import profile as P
    envs.set(envs.FIXED_K, 15)
    llm = P._engine(P._spec(), 8)
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    m = runner.drafter.model
    W = m.fc.input_size
    print("fc in", W, "layers", len(m.layers), flush=True)
    torch.manual_seed(0)
    with torch.inference_mode():
        for n in (1, 4, 16, 64):
            f = torch.randn(n, W); pos = torch.arange(100, 100 + n)
            for _ in range(20): m.write_context_kv(f, pos, None)
            t = time.perf_counter(); R = 200
            for _ in range(R): m.write_context_kv(f, pos, None)
            dt = (time.perf_counter() - t) / R * 1e6
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(50): m.write_context_kv(f, pos, None)
            print(f"n={n}: {dt:.1f} us per call (warm loop)", flush=True)
            if n in (1, 16):
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
main()
