"""Scratch (session 28): adsplit2.py for the dormant state: warmed on chat at c = 1, 8; the policy's and the context queue's parts. Usage: python adsplit3.py CONC PROMPT_SET MODE."""
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
    for name in ("plan", "on_step", "_optimum", "_choose", "_measure_probe"): wrap(A.AdaptivePolicy, name, "policy." + name)
    wrap(A.AcceptanceModel, "tick", "acc.tick"); wrap(A.CostModel, "observe_step", "cost.observe_step")
    for name in ("needed", "add", "end", "schedule", "prune", "shed", "take"): wrap(PD.ContextQueue, name, "queue." + name)
    for name in ("_plan", "_plan_then_propose", "_skip_forward", "_observe_verified", "_take_drafts", "propose", "_begin_draft", "_close_door"):
        wrap(PD.DFlashProposer, name, "proposer." + name)
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as R
    for name in ("execute_model", "sample_tokens", "propose_draft_token_ids", "take_draft_token_ids"):
        wrap(R, name, "runner." + name)
    from vllm.v1.core.sched.scheduler import Scheduler as S
    for name in ("schedule", "update_from_output", "update_draft_token_ids"):
        wrap(S, name, "sched." + name)
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    def reqs_of(name, n):
        _, ids = prompt_set(name, tok, n)
        return [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    for w in ("chat",):
        for c in (1, 8):
            drive(llm.llm_engine, reqs_of(w, 48), concurrency=c, id_prefix=f"w{w}{c}-")
    out = []
    for rep in range(2):
        T.clear(); N.clear()
        t0 = time.perf_counter()
        st = drive(llm.llm_engine, reqs_of(ps, 64), concurrency=conc, id_prefix=f"m{rep}-")
        steps = len(st["steps"]); wall = time.perf_counter() - t0
        ntok = sum(len(o["token_ids"]) for o in st["outputs"].values()) if isinstance(st["outputs"], dict) else sum(len(o["token_ids"]) for o in st["outputs"])
        out.append({"rep": rep, "steps": steps, "tok_s": round(ntok / wall, 1), "ms_per_step": round(1e3 * wall / steps, 3),
                    "parts": {k: round(1e3 * v / steps, 3) for k, v in sorted(T.items())}, "calls": dict(N)})
    print("RESULT", json.dumps({"mode": mode, "c": conc, "ps": ps, "runs": out}))
if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
