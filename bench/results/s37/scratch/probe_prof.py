"""cProfile of the adaptive policy's probes at batch C on prompts the drafter does not know
(session 37, issue #10): after a warm-up, ROUNDS rounds of 2C requests under cProfile; prints
what the proposer's drafting calls (``propose``) spend per call.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s37/scratch/probe_prof.py C [SET] [ROUNDS]
"""
import cProfile
import os
import pstats
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    conc = int(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "free"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    per = max(32, 2 * conc)
    _, ids = prompt_set(which, tok, (rounds + 1) * per)
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    engine = llm.llm_engine
    drive(engine, reqs[:per], concurrency=conc, id_prefix="warm-")
    prof = cProfile.Profile()
    prof.enable()
    drive(engine, reqs[per:], concurrency=conc, id_prefix="p-")
    prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("cumulative").print_callees("propose$")
    st.sort_stats("cumulative").print_stats("dflash_vllm|gpu_model_runner.py.*(propose|prepare)", 30)


if __name__ == "__main__":
    main()
