"""Session 40 (issue #10): what the target's auxiliary hidden-state capture costs a step, one K = 0 engine,
alternated: the drafting call stubbed out in both variants, aux capture on (as shipped) or off.

    python bench/results/s40/scratch/aux_ab.py CONCURRENCY TRIALS [chat]
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    c, trials, which = int(sys.argv[1]), int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "chat")
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import numpy as np
    envs.set(envs.FIXED_K, "0")
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 128)
    eos = [tok.eos_token_id]
    n = max(16, 2 * c)
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    inner = runner.model.model
    layers = inner.aux_hidden_state_layers
    print("aux layers", layers, flush=True)
    def stub(*a):
        d._skipped_step = True
        return [[] for _ in range(runner.input_batch.num_reqs)]
    runner.propose_draft_token_ids = stub
    acc = [0.0]
    ex = runner.execute_model
    def timed_ex(*a, **k):
        t = time.perf_counter()
        try:
            return ex(*a, **k)
        finally:
            acc[0] += time.perf_counter() - t
    runner.execute_model = timed_ex
    def setv(v):
        inner.aux_hidden_state_layers = layers if v == "aux" else ()
        runner.use_aux_hidden_state_outputs = v == "aux"
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 64, "stop_token_ids": eos} for p in ids[:8]], concurrency=c, id_prefix="warm-")
    res = {"aux": [], "noaux": []}; tv = {"aux": [], "noaux": []}
    for t in range(trials):
        for v in (("aux", "noaux") if t % 2 == 0 else ("noaux", "aux")):
            setv(v)
            rq = [{"prompt_token_ids": ids[(t * n + i) % len(ids)], "max_tokens": 64, "ignore_eos": False, "stop_token_ids": eos} for i in range(n)]
            acc[0] = 0.0
            t0 = time.perf_counter(); s = len(drive(engine, rq, concurrency=c, id_prefix=f"{v}{t}-")["steps"])
            res[v].append(1e3 * (time.perf_counter() - t0) / s); tv[v].append(1e3 * acc[0] / s)
    a, b = np.array(res["aux"]), np.array(res["noaux"]); ta, tb = np.array(tv["aux"]), np.array(tv["noaux"])
    print(f"c={c} {which}: ms/step aux {a.mean():.3f} noaux {b.mean():.3f}, aux/noaux geo {np.exp(np.mean(np.log(a / b))):.4f} median {np.median(a / b):.4f};"
          f" execute_model aux {ta.mean():.3f} noaux {tb.mean():.3f}, geo {np.exp(np.mean(np.log(ta / tb))):.4f}", flush=True)
main()
