"""In one process (K = 0 pinned, chat c=1): steps with the padded-width wrappers on the target's linears
against the same steps with them taken off, alternated (session 40).

    python bench/results/s40/scratch/wrap_ab.py [CONCURRENCY]
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.fixes.cpu_gemm_widths import MARK
    envs.set(envs.FIXED_K, 0)
    c = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    llm = P._engine(P._spec(), 8)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("chat", tok, 16)
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    mods = [m for m in runner.model.modules() if hasattr(getattr(m, "cpu_linear", None), MARK)]
    wrapped = {m: m.cpu_linear for m in mods}
    print("wrapped target linears:", len(mods), flush=True)
    drive(engine, reqs[:4], concurrency=c, id_prefix="warm-")
    res = {"on": [], "off": []}
    for i in range(6):
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            for m in mods:
                m.cpu_linear = wrapped[m] if mode == "on" else getattr(wrapped[m], MARK)
            t = time.perf_counter(); s = len(drive(engine, reqs, concurrency=c, id_prefix=f"{mode}{i}-")["steps"])
            res[mode].append(1e3 * (time.perf_counter() - t) / s)
    import numpy as np
    on, off = np.array(res["on"]), np.array(res["off"])
    print(f"c={c}: ms/step wrapped {on.round(3)} unwrapped {off.round(3)}; ratio of means {on.mean()/off.mean():.4f}, median of paired ratios {np.median(on/off):.4f}")
main()
