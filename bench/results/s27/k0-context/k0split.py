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
    if mode != "none": envs.set(envs.FIXED_K, 0)
    from dflash_vllm.bench import profile as P
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.proposers import dflash as PD
    from transformers import AutoTokenizer
    for name in ("add", "prune", "shed", "needed", "take", "schedule", "end"):
        wrap(PD.ContextQueue, name, "queue." + name)
    for name in ("_write_context", "_skip_forward", "_plan", "_plan_then_propose"):
        wrap(PD.DFlashProposer, name, "proposer." + name)
    wrap(PD, "_held", "_held")
    llm = P._engine(None if mode == "none" else P._spec(), max(8, conc))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    wrap(GPUModelRunner, "execute_model", "runner.execute_model")
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(ps, tok, max(64, 8 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 4
    drive(llm.llm_engine, reqs[:n], concurrency=conc, id_prefix="w-")
    T.clear(); N.clear()
    t0 = time.perf_counter()
    st = drive(llm.llm_engine, reqs[n:], concurrency=conc, id_prefix="m-")
    steps = len(st["steps"]); wall = time.perf_counter() - t0
    print("RESULT", json.dumps({"mode": mode, "c": conc, "steps": steps, "ms_per_step": round(1e3 * wall / steps, 3),
          "parts": {k: round(1e3 * v / steps, 4) for k, v in sorted(T.items())}}))
if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
