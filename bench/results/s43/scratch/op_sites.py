"""Session 43 (#12). Which source lines issue the torch ops of a drafting call: every aten op
dispatched inside propose_draft_token_ids (calls 21-60), counted by the innermost frame in
dflash_vllm or vllm, per drafting call. Ours at fixed K = 15 (or --native), demo pair.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s43/scratch/op_sites.py [CONC] [--native]
"""
import collections, sys, traceback


def main():
    conc = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 1
    from dflash_vllm import envs
    from dflash_vllm.bench import profile as P
    envs.set(envs.NATIVE, 1 if "--native" in sys.argv else 0)
    llm = P._engine(P._spec(dflash_adaptive=False), max(8, conc))
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from transformers import AutoTokenizer
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.training.tasks import make_samples
    from dflash_vllm.prompts import chat_ids

    sites, ops, calls = collections.Counter(), collections.Counter(), [0, 0]

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            site = "?"
            for fr in reversed(traceback.extract_stack(limit=40)[:-1]):
                f = fr.filename
                if ("dflash_vllm" in f or "/vllm/" in f) and "_python_dispatch" not in f:
                    site = f"{f.split('site-packages/')[-1].split('/work/main/')[-1]}:{fr.lineno} {fr.name}"
                    break
            sites[site] += 1
            ops[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    original = GPUModelRunner.propose_draft_token_ids

    def propose(self, *a, **k):
        calls[0] += 1
        if not 20 < calls[0] <= 60:
            return original(self, *a, **k)
        calls[1] += 1
        with Log():
            return original(self, *a, **k)

    GPUModelRunner.propose_draft_token_ids = propose
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt), "max_tokens": 96, "ignore_eos": False,
             "stop_token_ids": [tok.eos_token_id]} for s in make_samples(max(60, 8 * conc), seed=9)]
    drive(llm.llm_engine, reqs, concurrency=conc)
    n = calls[1]
    print(f"{n} logged drafting calls; {sum(ops.values()) / n:.1f} aten ops per call")
    for s, v in sites.most_common(60):
        print(f"{v / n:7.1f}  {s}")
    print("by op:", ", ".join(f"{o} {v / n:.1f}" for o, v in ops.most_common(30)))


if __name__ == "__main__":
    main()
