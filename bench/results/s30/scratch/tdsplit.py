"""Scratch (session 30): where adaptive's drafted step at c = 1 costs more than K = 15 pinned
(code prompts: the same tokens per step, 7.06 against 6.11 ms in s30/bench-adaptive.json).
python tdsplit.py k15|adaptive [prompt_set] [concurrency]: the split timer over the runner, the
proposer and the drafter's forward."""
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm import envs
from dflash_vllm.bench import profile as P

if __name__ == "__main__":
    mode = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "code"
    conc = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    envs.set(envs.FIXED_K, 15 if mode == "k15" else "adaptive")
    from transformers import AutoTokenizer
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 96)
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    engine = llm.llm_engine
    drive(engine, reqs[:32], concurrency=conc, id_prefix="warm-")
    timer = P._split_timer(engine)
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    for name in ("_begin_draft", "_end_draft", "_sample_draft_tokens", "build_per_group_and_layer_attn_metadata", "_flush_queue"):
        timer.wrap(d, name, f"drafter.{name}")
    timer.wrap(d.model, "forward", "drafter.model.forward")
    timer.wrap(d.model, "write_context_kv", "drafter.model.write_context_kv")
    t = time.perf_counter()
    steps = len(drive(engine, reqs[32:], concurrency=conc, id_prefix="s-")["steps"])
    ms = 1e3 * (time.perf_counter() - t) / steps
    print("SPLIT " + json.dumps({"mode": mode, "steps": steps, "ms_per_step": round(ms, 3),
                                 "parts": {k: round(v, 3) for k, v in timer.per_step(steps).items()}}), flush=True)
