"""What padded row counts (fixes/cpu_gemm_widths.py) give an engine without speculation
(session 38): the add-on installs them only in DFlash engines, so `none` in the bench is stock
vLLM; this puts a number on the part of "ours / none" that is the padding alone. One in-process
engine of the demo target per mode (none | nonepad: the same, with the target's oneDNN linears
wrapped as a DFlash engine's are), the bench's cells of SET at c = 1, 4, 16, 64 (max(16, 2c)
requests, up to 160 tokens), PASSES passes; tok/s per cell and pass.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s38/scratch/none_padded.py MODE [SETS] [PASSES]
"""
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    mode = sys.argv[1]
    sets = (sys.argv[2] if len(sys.argv) > 2 else "tasks,free").split(",")
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    from transformers import AutoTokenizer

    from dflash_vllm import paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.fixes import cpu_gemm_widths
    from dflash_vllm.prompts import prompt_set

    llm = P._engine(None, 64)
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    if mode == "nonepad":
        print("wrapped", cpu_gemm_widths.install(runner.model), flush=True)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]
    prompts = {s: prompt_set(s, tok, 128)[1] for s in sets}
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 16, "ignore_eos": False, "stop_token_ids": eos}
                   for p in prompts[sets[0]][:4]], concurrency=2, id_prefix="warm-")
    res = {}
    for p in range(passes):
        for s in sets:
            for c in (1, 4, 16, 64):
                reqs = [{"prompt_token_ids": x, "max_tokens": 160, "ignore_eos": False, "stop_token_ids": eos}
                        for x in prompts[s][:max(16, 2 * c)]]
                t = time.perf_counter()
                out = drive(engine, reqs, concurrency=c, id_prefix=f"p{p}{s}{c}-")
                tps = sum(x["new_tokens"] for x in out["steps"]) / (time.perf_counter() - t)
                res.setdefault(f"{s}@{c}", []).append(round(tps, 1))
    print("RESULT " + json.dumps({"mode": mode, "tok_s": res}), flush=True)


if __name__ == "__main__":
    main()
