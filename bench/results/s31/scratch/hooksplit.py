"""The proposer's per-step hook, itemised (session 31): the split of `bench profile --split`
plus the policy's and the context queue's parts and two module functions.

    python bench/results/s31/scratch/hooksplit.py k0|adaptive|none CONC [PROMPT_SET]
"""
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    mode, conc = sys.argv[1], int(sys.argv[2])
    which = sys.argv[3] if len(sys.argv) > 3 else "chat"
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths, metrics
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    from dflash_vllm.proposers import dflash as D

    if mode != "none":
        envs.set(envs.FIXED_K, 0 if mode == "k0" else "adaptive")
    llm = P._engine(None if mode == "none" else P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 3 * max(32, 2 * conc))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=conc, id_prefix="warm-")
    timer = P._split_timer(engine)
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    d = getattr(runner, "drafter", None)
    if d is not None:
        for name in ("on_step", "plan", "_choose", "_probe_due"):
            timer.wrap(d.policy, name, f"policy.{name}")
        for name in ("end", "schedule", "needed", "add", "take", "prune"):
            timer.wrap(d._ctx_queue, name, f"queue.{name}")
        for name in ("_observe_draft_time", "_close_door", "_flush_queue", "_write_context"):
            timer.wrap(d, name, f"proposer.{name}")
        timer.wrap(d.policy.cost, "observe_step", "cost.observe_step")
        timer.wrap(d.policy, "_measure_probe", "policy._measure_probe")
        timer.wrap(d.policy.acceptance, "tick", "acc.tick")
        timer.wrap(D, "_queued_features", "fn._queued_features")
        timer.wrap(D.metrics, "observe_draft_lengths", "fn.observe_draft_lengths")
        timer.wrap(runner, "_get_positions", "runner._get_positions")
    t = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=conc, id_prefix="s-")["steps"])
    ms = 1e3 * (time.perf_counter() - t) / steps
    parts = timer.per_step(steps)
    print("HOOK " + json.dumps({"mode": mode, "c": conc, "set": which, "steps": steps, "ms_per_step": round(ms, 4),
                                "us": {k: round(1e3 * v, 1) for k, v in parts.items()
                                       if not k.startswith(("runner._", "Scheduler", "runner.exec", "runner.take"))
                                       or k == "runner._get_positions"}}), flush=True)


if __name__ == "__main__":
    main()
