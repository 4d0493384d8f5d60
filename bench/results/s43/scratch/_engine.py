"""Session 43 scratch: the in-process engine the scripts here drive (demo pair, K = 15), at a
pinned K or adaptive, with three thirds of a prompt set: warm-up, measured, spare."""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def engine_at(fixed_k, concurrency: int, default_set: str):
    """(engine, model runner, requests, n): ``fixed_k`` an int or "adaptive"; the requests of the
    prompt set ``$SET`` (else ``default_set``), n per third."""
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.prompts import prompt_set

    envs.set(envs.FIXED_K, fixed_k)
    llm = P._engine(P._spec(), max(8, concurrency))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(os.environ.get("SET", default_set), tok, 3 * max(32, 2 * concurrency))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    return engine, runner, reqs, len(reqs) // 3
