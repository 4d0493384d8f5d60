import os, sys, time, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm import envs
def main(conc, ps):
    envs.set(envs.FIXED_K, 0)
    from dflash_vllm.bench import profile as P
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.models import drafter as D
    from transformers import AutoTokenizer
    W = {"calls": 0, "rows": 0, "s": 0.0}
    orig = D.DFlashDrafterModel.write_context_kv
    def w(self, f, p, s):
        t = time.perf_counter(); r = orig(self, f, p, s); W["s"] += time.perf_counter() - t
        W["calls"] += 1; W["rows"] += f.shape[0]; return r
    D.DFlashDrafterModel.write_context_kv = w
    llm = P._engine(P._spec(), max(8, conc))
    core = llm.llm_engine.engine_core.engine_core
    print("block_size", core.scheduler.cache_config.block_size)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(ps, tok, 8 * conc)
    print("prompt lens mean", sum(map(len, ids)) / len(ids), "min", min(map(len, ids)), "max", max(map(len, ids)))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    st = drive(llm.llm_engine, reqs, concurrency=conc)
    drafter = core.model_executor.driver_worker.worker.model_runner.drafter
    tot = sum(s.get("num_tokens", 0) for s in st["steps"]) if st["steps"] and "num_tokens" in st["steps"][0] else None
    print("RESULT", json.dumps({"c": conc, "set": ps, "steps": len(st["steps"]), "write_calls": W["calls"], "rows_written": W["rows"],
                                "write_ms_per_step": round(1e3 * W["s"] / len(st["steps"]), 3), "stats": drafter.stats(), "tokens": tot}))
if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
