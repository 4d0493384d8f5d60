"""Session 42 (issue #12): cProfile of the drafting call (runner.propose_draft_token_ids) at one
concurrency, ours or native, K = 15 every step, held-out task prompts (as `bench profile draft`).
For proportions only (cProfile inflates small calls).

    python bench/results/s42/scratch/draft_cprofile.py ours|native CONCURRENCY
"""
import cProfile
import os
import pstats
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    who, c = sys.argv[1], int(sys.argv[2])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import chat_ids
    from dflash_vllm.training.tasks import make_samples
    envs.set(envs.NATIVE, 1 if who == "native" else 0)
    llm = P._engine(P._spec(dflash_adaptive=False), max(8, c))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    original = GPUModelRunner.propose_draft_token_ids
    prof, calls = cProfile.Profile(), [0]

    def propose(self, *a, **k):
        calls[0] += 1
        if calls[0] < 20:
            return original(self, *a, **k)
        prof.enable()
        try:
            return original(self, *a, **k)
        finally:
            prof.disable()
    GPUModelRunner.propose_draft_token_ids = propose
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt), "max_tokens": 96, "ignore_eos": False,
             "stop_token_ids": [tok.eos_token_id]} for s in make_samples(max(60, 8 * c), seed=9)]
    drive(llm.llm_engine, reqs, concurrency=c)
    print(f"{who} c={c}: {calls[0] - 19} profiled drafting calls")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
