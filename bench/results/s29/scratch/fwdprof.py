"""Scratch (session 29): the target's forward by op, none vs K = 0 pinned (chat c=16), torch.profiler."""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
if __name__ == "__main__":
    mode, conc = sys.argv[1], int(sys.argv[2])
    import torch
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    if mode != "none":
        envs.set(envs.FIXED_K, 0)
    llm = P._engine(None if mode == "none" else P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("chat", tok, 3 * max(32, 2 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=conc, id_prefix="w-")
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    fwd = runner._model_forward
    times = []
    def timed(*a, **k):
        t = time.perf_counter(); out = fwd(*a, **k); times.append(time.perf_counter() - t); return out
    runner._model_forward = timed
    drive(engine, reqs[n:2 * n], concurrency=conc, id_prefix="a-")
    import statistics
    print(f"{mode}: model_forward median {1e3*statistics.median(times):.3f} ms mean {1e3*statistics.mean(times):.3f} over {len(times)}")
    print("model class", type(runner.model).__name__, "aux layers", getattr(runner.model, "aux_hidden_state_layers", None) or getattr(getattr(runner.model, "model", None), "aux_hidden_state_layers", None))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        drive(engine, reqs[2 * n:], concurrency=conc, id_prefix="b-")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
