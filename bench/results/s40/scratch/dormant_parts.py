"""Session 40 (issues #10, #12). Per-call wall time of the proposer's pieces (SplitTimer, nested: a caller's
time includes its callees'), in-process engine; K = 0 pinned, K = 15 pinned or adaptive; chat prompts
unless SET names another set.

    [SET=tasks] [MORE=1] python bench/results/s40/scratch/dormant_parts.py k0|k15|adaptive CONCURRENCY
"""
import os, sys, time, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

def main():
    mode, c = sys.argv[1], int(sys.argv[2])
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    import dflash_vllm.proposers.dflash as D
    envs.set(envs.FIXED_K, {"k0": 0, "k15": 15}.get(mode, "adaptive"))
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(os.environ.get("SET", "chat"), tok, 3 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 3
    engine = llm.llm_engine
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    t = P.SplitTimer()
    for name in ("_plan_then_propose", "_plan", "_idle_plan", "_skip_forward", "_write_context", "_catch_up", "_observe_draft_time", "_flush_queue", "propose", "_sample_draft_tokens"):
        t.wrap(d, name, name)
    q = d._ctx_queue
    for name in ("end", "schedule", "needed", "kept_rows", "add", "take", "prune", "shed"):
        if hasattr(q, name):  # (kept_rows: session 42 on)
            t.wrap(q, name, "q." + name)
    t.wrap(d.policy, "idle_step", "policy.idle_step")
    if os.environ.get("MORE"):  # (session 42) the policy's clocks and the /metrics histogram too
        import dflash_vllm.metrics as M
        t.wrap(d.policy, "on_step", "policy.on_step")
        t.wrap(M, "observe_draft_lengths", "metrics.observe_draft_lengths")
    t.wrap(d.policy, "plan", "policy.plan")
    t.wrap(d.model, "write_context_kv", "model.write_context_kv"); t.wrap(d.model, "forward_block", "model.forward_block")
    t.wrap(runner, "_get_positions", "runner._get_positions")
    t.wrap(runner, "propose_draft_token_ids", "runner.propose_draft_token_ids")
    t.wrap(runner, "take_draft_token_ids", "runner.take_draft_token_ids")
    qf = D._queued_features
    D._queued_features = lambda *a: tq(*a)
    def tq(*a):
        s = time.perf_counter(); r = qf(*a); t.seconds.setdefault("_queued_features", 0.0); t.calls.setdefault("_queued_features", 0)
        t.seconds["_queued_features"] += time.perf_counter() - s; t.calls["_queued_features"] += 1; return r
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    ms = 1e3 * (time.perf_counter() - t0) / steps
    print(f"{mode} c={c}: {steps} steps {ms:.3f} ms/step, drafter forwards {d.num_drafter_forwards}")
    for k in sorted(t.seconds):
        if t.calls[k]:
            print(f"  {k:32s} calls {t.calls[k]:6d}  us/call {1e6*t.seconds[k]/t.calls[k]:8.1f}  us/step {1e6*t.seconds[k]/steps:8.1f}")

if __name__ == "__main__":
    main()
