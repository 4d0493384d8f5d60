import os, sys, time, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm import envs
def main(native, conc):
    envs.set(envs.NATIVE, 1 if native else 0)
    from dflash_vllm.bench import profile as P
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from transformers import AutoTokenizer
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("tasks", tok, 16 * conc)
    reqs = [{"prompt_token_ids": p, "max_tokens": 128, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    drive(llm.llm_engine, reqs[: len(reqs) // 4], concurrency=conc, id_prefix="w-")
    timer = P._split_timer(llm.llm_engine)
    st = drive(llm.llm_engine, reqs[len(reqs) // 4:], concurrency=conc, id_prefix="m-")
    steps = len(st["steps"])
    print("RESULT", json.dumps({"native": native, "c": conc, "steps": steps, "parts": {k: round(v, 3) for k, v in timer.per_step(steps).items()}}), flush=True)
if __name__ == "__main__":
    main(sys.argv[1] == "native", int(sys.argv[2]))
