"""Session 36: cProfile of the drafting calls only (propose_draft_token_ids), ours at fixed K = 15.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s36/scratch/cprof_draft.py [CONC] [--native] [--cumulative]

Prints the 30 functions with the most own time (tottime) per drafting call; with --cumulative
(session 42), the most time including their callees (cumtime)."""
import cProfile
import pstats
import sys


def main():
    conc = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 4
    from dflash_vllm import envs
    from dflash_vllm.bench import profile as P

    envs.set(envs.NATIVE, 1 if "--native" in sys.argv else 0)
    llm = P._engine(P._spec(dflash_adaptive=False), max(8, conc))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from transformers import AutoTokenizer
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.training.tasks import make_samples
    from dflash_vllm.prompts import chat_ids

    prof = cProfile.Profile()
    calls = [0]
    original = GPUModelRunner.propose_draft_token_ids

    def propose(self, *a, **k):
        calls[0] += 1
        if calls[0] <= 20:
            return original(self, *a, **k)
        prof.enable()
        try:
            return original(self, *a, **k)
        finally:
            prof.disable()

    GPUModelRunner.propose_draft_token_ids = propose
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt), "max_tokens": 96, "ignore_eos": False,
             "stop_token_ids": [tok.eos_token_id]} for s in make_samples(max(60, 8 * conc), seed=9)]
    drive(llm.llm_engine, reqs, concurrency=conc)
    n = calls[0] - 20
    st = pstats.Stats(prof)
    cum = "--cumulative" in sys.argv
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][3 if cum else 2])[:30]
    print(f"{n} profiled drafting calls; {'cumulative' if cum else 'own'} time per call (us), calls per call, function")
    for (f, line, name), (cc, nc, tt, ct, _) in rows:
        print(f"{1e6 * (ct if cum else tt) / n:8.1f} {nc / n:6.1f}  {f.split('site-packages/')[-1].split('/work/main/')[-1]}:{line} {name}")


if __name__ == "__main__":
    main()
