"""Scratch (session 28): wall-clock parts of the adaptive machinery per step in a fresh engine. Usage: python adsplit.py CONC PROMPT_SET MODE (MODE: adaptive or a pinned K)."""
import os, sys, time, json, collections
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm import envs
T = collections.defaultdict(float); N = collections.Counter()
def wrap(owner, name, label):
    f = getattr(owner, name)
    def w(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: T[label] += time.perf_counter() - t; N[label] += 1
    setattr(owner, name, w)
def main(conc, ps, mode):
    envs.set(envs.FIXED_K, mode)
    from dflash_vllm.bench import profile as P
    from dflash_vllm import paths, adaptive as A
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.proposers import dflash as PD
    from transformers import AutoTokenizer
    for name in ("on_step", "plan", "on_draft_time", "_choose", "_optimum", "_measure_probe"):
        wrap(A.AdaptivePolicy, name, "policy." + name)
    wrap(A.AcceptanceModel, "observe", "acc.observe"); wrap(A.AcceptanceModel, "survival", "acc.survival")
    for name in ("_plan", "_plan_then_propose", "_observe_verified", "_take_drafts", "propose", "_begin_draft", "_sample_draft_tokens", "_flush_queue"):
        wrap(PD.DFlashProposer, name, "proposer." + name)
    from dflash_vllm.models import drafter as DM
    for name in ("forward", "write_context_kv", "compute_logits"):
        wrap(DM.DFlashDrafterModel, name, "model." + name)
    wrap(PD.DFlashProposer, "build_per_group_and_layer_attn_metadata", "proposer.build_md")
    llm = P._engine(P._spec(), max(8, conc))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    wrap(GPUModelRunner, "execute_model", "runner.execute_model")
    wrap(GPUModelRunner, "_bookkeeping_sync", "runner._bookkeeping_sync")
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(ps, tok, max(64, 8 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 4
    drive(llm.llm_engine, reqs[:n], concurrency=conc, id_prefix="w-")
    T.clear(); N.clear()
    t0 = time.perf_counter()
    st = drive(llm.llm_engine, reqs[n:], concurrency=conc, id_prefix="m-")
    steps = len(st["steps"]); wall = time.perf_counter() - t0
    print("RESULT", json.dumps({"mode": mode, "c": conc, "steps": steps, "ms_per_step": round(1e3 * wall / steps, 3), "tok_s": None,
          "parts": {k: [round(1e3 * v / steps, 4), N[k]] for k, v in sorted(T.items())}}))
if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
