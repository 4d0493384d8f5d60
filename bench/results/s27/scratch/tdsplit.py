"""Scratch: T_d parts at concurrency C on the bench's tasks prompts, K fixed at 15 (ours) or native."""
import os, sys, time, collections, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import torch
from dflash_vllm import envs
T = collections.defaultdict(float); N = collections.Counter()
def wrap(owner, name, label):
    f = getattr(owner, name)
    def w(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: T[label] += time.perf_counter() - t; N[label] += 1
    setattr(owner, name, w)
def main(native, conc):
    envs.set(envs.NATIVE, 1 if native else 0)
    if not native: envs.set(envs.FIXED_K, 15)
    from dflash_vllm.bench import profile as P
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from transformers import AutoTokenizer
    llm = P._engine(P._spec(), max(8, conc))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    wrap(GPUModelRunner, "propose_draft_token_ids", "T_d"); wrap(GPUModelRunner, "execute_model", "T_v")
    if not native:
        from dflash_vllm.models import drafter as D
        from dflash_vllm.proposers import dflash as PD
        wrap(D.DFlashDrafterModel, "write_context_kv", "ctx"); wrap(D.DFlashDrafterModel, "forward", "fwd")
        wrap(D, "mlp", "fwd.mlp"); wrap(D.DrafterAttention, "forward", "fwd.attn")
        wrap(D.DFlashDrafterModel, "compute_logits", "logits"); wrap(PD.DFlashProposer, "propose", "propose")
        wrap(PD.DFlashProposer, "build_per_group_and_layer_attn_metadata", "md")
    else:
        import vllm.v1.spec_decode.dflash as ND
        print([n for n in dir(ND) if "DFlash" in n])
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("tasks", tok, 16 * conc)
    reqs = [{"prompt_token_ids": p, "max_tokens": 128, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    drive(llm.llm_engine, reqs[: len(reqs) // 4], concurrency=conc, id_prefix="w-")
    T.clear(); N.clear()
    st = drive(llm.llm_engine, reqs[len(reqs) // 4:], concurrency=conc, id_prefix="m-")
    steps = len(st["steps"])
    print("RESULT", json.dumps({"native": native, "c": conc, "steps": steps, "ms_per_step": {k: round(1e3 * v / steps, 3) for k, v in sorted(T.items())}}), flush=True)
if __name__ == "__main__":
    main(sys.argv[1] == "native", int(sys.argv[2]))
