"""Where a step that drafts nothing spends its time, against a no-speculation step (CPU, demo pair).

    .venv/bin/python bench/profile_k0_step.py none /tmp/none.prof 1    # no speculation
    .venv/bin/python bench/profile_k0_step.py k0 /tmp/k0.prof 1        # DFlash with K pinned to 0
    .venv/bin/python bench/profile_k0_step.py adaptive /tmp/ad.prof 64 # the adaptive policy, c = 64

Runs the bench's `free` prompts in a closed loop at the given concurrency (engine core in this
process), prints ms per engine step unprofiled and under cProfile, and writes the cProfile
stats; compare two with `python -m pstats` (sort by cumulative). Session 7 used it to find the
0-draft rejection sampling and the drafter input preparation vLLM ran on K = 0 steps
(patch `plain-step-shortcut`): at c = 1, 8.4 -> 6.8 ms per step against 6.2-6.7 ms without
speculation. Single runs vary by ~10 % on a 2-core VM: compare within one session, alone.
"""
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
MODE, OUT, CONC = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1
if MODE in ("k0", "adaptive"):
    os.environ["DFLASH_VLLM_FIXED_K"] = "0" if MODE == "k0" else "adaptive"

if __name__ == "__main__":
    import cProfile
    import time

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from dflash_vllm import paths
    from dflash_vllm.bench.prompts import prompt_set

    spec = None if MODE == "none" else {"method": "dflash", "model": str(paths.DEMO_DRAFTER),
                                         "num_speculative_tokens": 15}
    llm = LLM(model=str(paths.DEMO_TARGET), speculative_config=spec, dtype="float32", kv_cache_memory_bytes=2**29,
              skip_tokenizer_init=True, max_num_seqs=max(8, CONC), enforce_eager=True, max_model_len=1024)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("free", tok, 3 * max(32, 2 * CONC))
    sp = SamplingParams(max_tokens=64, temperature=0, stop_token_ids=[tok.eos_token_id])
    engine = llm.llm_engine

    def run(prompts, tag):
        todo, inflight, done, steps = list(range(len(prompts)))[::-1], 0, 0, 0
        while done < len(prompts):
            while todo and inflight < CONC:
                i = todo.pop()
                engine.add_request(f"{tag}{i}", TokensPrompt(prompt_token_ids=prompts[i]), sp)
                inflight += 1
            for o in engine.step():
                if o.finished:
                    inflight, done = inflight - 1, done + 1
            steps += 1
        return steps

    n = len(ids) // 3
    run(ids[:n], "warm")
    t = time.perf_counter()
    steps = run(ids[n:2 * n], "a")
    print(f"{MODE} c={CONC}: {steps} steps, {1e3 * (time.perf_counter() - t) / steps:.2f} ms/step unprofiled", flush=True)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    steps = run(ids[2 * n:], "b")
    prof.disable()
    print(f"{MODE} c={CONC}: {steps} steps, {1e3 * (time.perf_counter() - t) / steps:.2f} ms/step under cProfile", flush=True)
    prof.dump_stats(OUT)
