"""Session 42 (issue #10): cProfile of the adaptive policy's full plans (AdaptivePolicy.plan, the
non-idle steps) and of the idle window's catch-up, in-process, chat prompts unless PROMPT_SET. For proportions only.

    python bench/results/s42/scratch/plan_cprofile.py CONCURRENCY [PROMPT_SET]
"""
import cProfile
import os
import pstats
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    c = int(sys.argv[1])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(sys.argv[2] if len(sys.argv) > 2 else "chat", tok, 3 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    prof = cProfile.Profile()
    for obj, name in ((d.policy, "plan"), (d, "_catch_up")):
        fn = getattr(obj, name)

        def wrapped(*a, _fn=fn, **k):
            prof.enable()
            try:
                return _fn(*a, **k)
            finally:
                prof.disable()
        setattr(obj, name, wrapped)
    drive(engine, reqs[n:], concurrency=c, id_prefix="s-")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
