"""Scratch (session 31): what each probe costs in the engine (demo pair, adaptive, a prompt set at
concurrency C, short requests as in the bench's cells): per drafting call, its wall time, the
deferred context it flushed (rows, ms), its block tokens, and the next step's (the verify's)
execute_model time against the median plain step's.

    python bench/results/s31/scratch/probecost.py chat 16
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import numpy as np


def main():
    which, conc = sys.argv[1], int(sys.argv[2])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 6 * max(32, 2 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 48, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    log, steps = [], []
    ex = runner.execute_model

    def execute_model(*a, **k):
        t = time.perf_counter()
        out = ex(*a, **k)
        steps.append((time.perf_counter() - t, runner.input_batch.num_reqs))
        return out
    runner.execute_model = execute_model
    parts = {}
    for name in ("_prepare_inputs", "_build_attention_metadata", "_model_forward", "_update_states", "sample_tokens", "_sample", "_bookkeeping_sync"):
        fn = getattr(runner, name)

        def timed(*a, _fn=fn, _n=name, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                parts.setdefault(len(steps), {})[_n] = parts.get(len(steps), {}).get(_n, 0.0) + (time.perf_counter() - t) * 1e3
        setattr(runner, name, timed)
    orig_flush = d._flush_queue

    def flush():
        rows = d._ctx_queue.rows
        t = time.perf_counter()
        orig_flush()
        log[-1]["flush_rows"] += rows
        log[-1]["flush_ms"] += (time.perf_counter() - t) * 1e3
    d._flush_queue = flush
    orig_prop = d.propose

    def propose(*a, **k):
        log.append({"step": len(steps), "flush_rows": 0, "flush_ms": 0.0})
        t = time.perf_counter()
        out = orig_prop(*a, **k)
        log[-1]["propose_ms"] = (time.perf_counter() - t) * 1e3
        log[-1]["k"] = out.shape
        return out
    d.propose = propose
    n = len(reqs) // 2
    drive(engine, reqs[:n], concurrency=conc, id_prefix="warm-")
    log.clear(); steps.clear(); parts.clear()
    drive(engine, reqs[n:], concurrency=conc, id_prefix="s-")
    plain = np.median([s for s, _ in steps]) * 1e3
    print(f"{which} c={conc}: {len(steps)} steps, median execute_model {plain:.2f} ms; {len(log)} drafting calls")
    for e in log:
        i = e["step"]
        nxt = steps[i][0] * 1e3 if i < len(steps) else float("nan")
        for j in (i - 1, i, i + 1):
            print("      parts at step", j, {k: round(v, 2) for k, v in parts.get(j, {}).items()})
        print(f"  step {i:4d} batch {steps[i - 1][1]:3d}: propose {e['propose_ms']:6.2f} ms (flush {e['flush_rows']:4d} rows {e['flush_ms']:5.2f} ms), drafts {tuple(e['k'])}, next execute_model {nxt:6.2f} ms")


if __name__ == "__main__":
    main()
