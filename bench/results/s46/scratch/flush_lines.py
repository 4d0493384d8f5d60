"""Session 46 (issue #10): line profile of a probe's deferred-context flush (ContextQueue.take,
prune, _gather_features, _gather) and the write, in-process, adaptive, chat prompts at
CONCURRENCY (the door closed: the sentinels' rows queued).

    python bench/results/s46/scratch/flush_lines.py CONCURRENCY [REQUESTS]
"""
import os
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    c = int(sys.argv[1])
    n_req = int(sys.argv[2]) if len(sys.argv) > 2 else 6 * max(32, 2 * c)
    from line_profiler import LineProfiler
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import dflash_vllm.proposers.dflash as D
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("chat", tok, n_req)
    reqs = [{"prompt_token_ids": p, "max_tokens": 160, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    engine = llm.llm_engine
    drive(engine, reqs[: n_req // 3], concurrency=c, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    lp = LineProfiler()
    for f in (D.ContextQueue.take, D.ContextQueue.prune, D._gather_features, D._gather, d._flush_queue.__func__):
        lp.add_function(f)
    lp.enable_by_count()
    D.ContextQueue.take = lp(D.ContextQueue.take)
    D.ContextQueue.prune = lp(D.ContextQueue.prune)
    D._gather_features = lp(D._gather_features)
    D._gather = lp(D._gather)
    f0 = d.num_drafter_forwards
    res = drive(engine, reqs[n_req // 3:], concurrency=c, id_prefix="s-")
    print(f"c={c}: {len(res['steps'])} steps, drafter forwards {d.num_drafter_forwards - f0}")
    lp.print_stats(output_unit=1e-6, stripzeros=True)


if __name__ == "__main__":
    main()
